#!/usr/bin/env bash
# Train any fairseq(-local) architecture or Hydra config on binarized data.
#
# usage: scripts/train.sh --data BIN_DIR --save-dir DIR (--arch ARCH | --config configs/X/Y.yaml)
#                         [--task T] [--fp16|--bf16] [--gpus N] [--cpu] [-- EXTRA fairseq ARGS]
#   --arch A        a registered architecture (ours: see README), trained with fairseq-train
#   --config FILE   a Hydra YAML from configs/, trained with fairseq-hydra-train; EXTRA args are
#                   then Hydra overrides (key=value)
#   --task T        fairseq task for --arch (default: translation)
#   --fp16/--bf16   mixed precision: --fp16 on a GPU only; --bf16 on a GPU or the CPU (where the CPU
#                   lacks a bf16 kernel, e.g. the LSTM on AVX2-only CPUs, that layer computes in fp32)
#   --gpus N        number of GPUs (default: all visible); N > 1 uses fairseq's distributed training
#   --cpu           force CPU even when a GPU is present
# The GPU is used when torch sees one, --cpu otherwise. Everything after `--` goes to fairseq
# unchanged (e.g. -- --max-epoch 20 --lr 1e-3 --optimizer adam).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
opt --data data; opt --save-dir save; opt --arch arch; opt --config config; opt --task task translation
flag --fp16 prec fp16 ""; flag --bf16 prec bf16 ""; opt --gpus gpus; flag --cpu cpu
rest_args extra "fairseq options go after --"
parse_options "$@"
! given --fp16 || ! given --bf16 || die "--fp16 and --bf16 are exclusive"
[ -n "$data" ] || die "--data is required"
need_dir "$data" "--data"
[ -n "$save" ] || die "--save-dir is required"
[ -n "$arch" ] || [ -n "$config" ] || die "one of --arch or --config is required"
[ -z "$arch" ] || [ -z "$config" ] || die "--arch and --config are exclusive"
[ -z "$config" ] || need_file "$config" "--config"
if [ -n "$config" ]; then  # fairseq-hydra-train resolves its config twice: '${' in a path is read as an interpolation
  case "$data" in *'${'*) die "--data $data holds '\${', which fairseq-hydra-train reads as an interpolation: rename it" ;; esac
  case "$save" in *'${'*) die "--save-dir $save holds '\${', which fairseq-hydra-train reads as an interpolation: rename it" ;; esac
fi
[ -z "$gpus" ] || [[ "$gpus" =~ ^[1-9][0-9]*$ ]] || die "--gpus must be a positive integer, not '$gpus'"
activate_env
ngpu=$(python -c "import torch; print(torch.cuda.device_count())")
if [ "$cpu" = 1 ] || [ "$ngpu" = 0 ]; then
  [ "$prec" != fp16 ] || die "--fp16 needs a GPU (none visible, or --cpu given): use --bf16 on CPU"
  [ -z "$gpus" ] || [ "$gpus" = 1 ] || die "--gpus $gpus: no GPU is visible"
  device=cpu; world=1
else
  device=cuda; world=${gpus:-$ngpu}
  [ "$world" -le "$ngpu" ] || die "--gpus $world: only $ngpu GPU(s) visible"
fi
mkdir -p "$save"
say "training on $device (world size $world)${prec:+, $prec}; checkpoints in $save"
if [ -n "$arch" ]; then
  args=("$data" --user-dir "$USER_DIR" --task "$task" --arch "$arch" --save-dir "$save")
  if [ "$device" = cpu ]; then args+=(--cpu); else
    args+=(--distributed-world-size "$world")
    [ "$prec" = fp16 ] && args+=(--fp16)
  fi
  [ "$prec" = bf16 ] && args+=(--bf16)
  exec fairseq-train "${args[@]}" "${extra[@]}"
else
  cdir=$(cd "$(dirname "$config")" && pwd); cname=$(basename "$config" .yaml)
  data=$(cd "$data" && pwd); save=$(cd "$save" && pwd)
  # quoted for Hydra's grammar: a path with ',', '=', '#', quotes, spaces or brackets is read back as it is
  q=$(python -m fairseq_local_repro.text.hydra_quote "$data" "$USER_DIR" "$save" "$save/hydra") || exit 2
  mapfile -t q <<<"$q"
  args=(--config-dir "$cdir" --config-name "$cname" "++task.data=${q[0]}" "++common.user_dir=${q[1]}"
        "++checkpoint.save_dir=${q[2]}" "hydra.run.dir=${q[3]}")
  if [ "$device" = cpu ]; then args+=("++common.cpu=true" "++distributed_training.distributed_world_size=1"); else
    args+=("++distributed_training.distributed_world_size=$world")
    [ "$prec" = fp16 ] && args+=("++common.fp16=true")
  fi
  [ "$prec" = bf16 ] && args+=("++common.bf16=true")
  exec fairseq-hydra-train "${args[@]}" "${extra[@]}"
fi
