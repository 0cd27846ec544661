"""Train any fairseq(-local) architecture or Hydra config on binarized data.

usage: scripts/train.sh --data BIN_DIR --save-dir DIR (--arch ARCH | --config configs/X/Y.yaml)
                        [--task T] [--fp16|--bf16] [--gpus N] [--cpu] [-- EXTRA fairseq ARGS]
  --arch A        a registered architecture (ours: see README), trained with fairseq-train
  --config FILE   a Hydra YAML from configs/, trained with fairseq-hydra-train; EXTRA args are
                  then Hydra overrides (key=value)
  --task T        fairseq task for --arch (default: translation)
  --fp16/--bf16   mixed precision: --fp16 on a GPU only; --bf16 on a GPU or the CPU (where the CPU
                  lacks a bf16 kernel, e.g. the LSTM on AVX2-only CPUs, that layer computes in fp32)
  --gpus N        number of GPUs (default: all visible); N > 1 uses fairseq's distributed training
  --cpu           force CPU even when a GPU is present
The GPU is used when torch sees one, --cpu otherwise. Everything after `--` goes to fairseq
unchanged (e.g. -- --max-epoch 20 --lr 1e-3 --optimizer adam).  Ctrl-C or kill ends the trainer
(and every process it started) with it: one line, exit status 130.
"""
import dataclasses
import os
import sys
from typing import IO, List, Optional

from fairseq_local_repro.doors import Console, DoorError, flag, main_door, number, opt, parse_options, rest
from fairseq_local_repro.processes import USER_DIR
from fairseq_local_repro.text.hydra_quote import quote

PROG = "train.sh"


@dataclasses.dataclass
class TrainOptions:
    data: str = opt("--data", "")
    save_dir: str = opt("--save-dir", "")
    arch: str = opt("--arch", "")
    config: str = opt("--config", "")
    task: str = opt("--task", "translation")
    fp16: bool = flag("--fp16")
    bf16: bool = flag("--bf16")
    gpus: int = opt("--gpus", None, number)
    cpu: bool = flag("--cpu")
    extra: List[str] = rest("fairseq options go after --")

    def check(self):
        """:class:`DoorError` for the first mistake; nothing is written."""
        if self.fp16 and self.bf16:
            raise DoorError("--fp16 and --bf16 are exclusive")
        if not self.data:
            raise DoorError("--data is required")
        if not os.path.isdir(self.data):
            raise DoorError(f"--data '{self.data}' does not exist")
        if not self.save_dir:
            raise DoorError("--save-dir is required")
        if not self.arch and not self.config:
            raise DoorError("one of --arch or --config is required")
        if self.arch and self.config:
            raise DoorError("--arch and --config are exclusive")
        if self.config and not os.path.isfile(self.config):
            raise DoorError(f"--config '{self.config}' does not exist")
        if self.gpus is not None and (not isinstance(self.gpus, int) or self.gpus < 1):
            raise DoorError(f"--gpus must be a positive integer, not '{self.gpus}'")
        if self.config:  # fairseq-hydra-train resolves its config twice: '${' in a path is an interpolation
            for name, value in (("--data", self.data), ("--save-dir", self.save_dir)):
                if "${" in value:
                    raise DoorError(f"{name} {value} holds '${{', which fairseq-hydra-train reads as an "
                                     "interpolation: rename it")

    def device(self):
        """``(device, world size)``: the GPUs torch sees unless --cpu (:class:`DoorError` for options
        the machine cannot honour)."""
        import torch

        ngpu = torch.cuda.device_count()
        if self.cpu or ngpu == 0:
            if self.fp16:
                raise DoorError("--fp16 needs a GPU (none visible, or --cpu given): use --bf16 on CPU")
            if self.gpus is not None and self.gpus > 1:
                raise DoorError(f"--gpus {self.gpus}: no GPU is visible")
            return "cpu", 1
        world = self.gpus or ngpu
        if world > ngpu:
            raise DoorError(f"--gpus {world}: only {ngpu} GPU(s) visible")
        return "cuda", world


def command(o: TrainOptions, device: str, world: int) -> List[str]:
    """The fairseq-train (``--arch``) or fairseq-hydra-train (``--config``) command line."""
    if o.arch:
        cmd = ["fairseq-train", o.data, "--user-dir", USER_DIR, "--task", o.task, "--arch", o.arch,
               "--save-dir", o.save_dir]
        if device == "cpu":
            cmd.append("--cpu")
        else:
            cmd += ["--distributed-world-size", str(world)] + (["--fp16"] if o.fp16 else [])
        return cmd + (["--bf16"] if o.bf16 else []) + o.extra
    config = os.path.abspath(o.config)
    data, save = os.path.abspath(o.data), os.path.abspath(o.save_dir)
    # quoted for Hydra's grammar: a path with ',', '=', '#', quotes, spaces or brackets is read back as it is
    cmd = ["fairseq-hydra-train", "--config-dir", os.path.dirname(config),
           "--config-name", os.path.splitext(os.path.basename(config))[0], f"++task.data={quote(data)}",
           f"++common.user_dir={quote(USER_DIR)}", f"++checkpoint.save_dir={quote(save)}",
           f"hydra.run.dir={quote(os.path.join(save, 'hydra'))}"]
    if device == "cpu":
        cmd += ["++common.cpu=true", "++distributed_training.distributed_world_size=1"]
    else:
        cmd += [f"++distributed_training.distributed_world_size={world}"] + (["++common.fp16=true"] if o.fp16 else [])
    return cmd + (["++common.bf16=true"] if o.bf16 else []) + o.extra


def train(o: TrainOptions, log: Optional[IO] = None, stdout: Optional[IO] = None) -> int:
    """Run the trainer (its output to ``log``, by default the terminal; its stdout to ``stdout`` when
    given); its exit status."""
    o.check()
    device, world = o.device()
    try:
        os.makedirs(o.save_dir, exist_ok=True)
    except OSError as err:
        raise DoorError(f"--save-dir {o.save_dir}: cannot create it ({err.strerror})") from None
    console = Console(PROG, log)
    precision = ", fp16" if o.fp16 else ", bf16" if o.bf16 else ""
    console.say(f"training on {device} (world size {world}){precision}; checkpoints in {o.save_dir}")
    return console.run(command(o, device, world), stdout=stdout)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    status = {}

    def run():
        status["rc"] = train(parse_options(TrainOptions, argv, __doc__)[0])

    return main_door(PROG, run, lambda: f"{PROG}: interrupted") or status.get("rc", 0)


if __name__ == "__main__":
    sys.exit(main())
