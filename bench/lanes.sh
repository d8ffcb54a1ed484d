#!/usr/bin/env bash
# Several pieces of GPU work side by side on one multi-GPU machine, one "lane" per group of GPUs, each
# lane's steps one after the other; everything a step writes (results, printed output, logs) goes to $R.
# Usage (from the repository root, on the GPU machine):
#   R=/tmp/r1 bash bench/lanes.sh 'nb 0,1 08 560' 'nb 2 02 560' 'nb 3 07 560 ; bench 3 300 race_gpu.py'
# A lane is steps separated by ' ; ': "nb GPU_IDS NOTEBOOK SECONDS" runs a notebook's gpu profile through
# bench/notebooks_gpu.py; "bench GPU_IDS SECONDS SCRIPT ARGS..." runs bench/SCRIPT with those GPUs visible
# ({left_s} and {left_min} in ARGS become the seconds / minutes the step has, less one for writing results).
set -u
: "${R:?set R to the results folder}"
# lanes run at the same time, so a GPU belongs to one lane only: two notebooks on one GPU measure each other
declare -A gpu_lane=()
lane_no=0
for lane in "$@"; do
    lane_no=$((lane_no + 1))
    IFS=';' read -ra steps <<< "$lane"
    for s in "${steps[@]}"; do
        read -ra words <<< "$s"
        IFS=',' read -ra ids <<< "${words[1]:-}"
        for id in "${ids[@]}"; do
            if [[ -n "${gpu_lane[$id]:-}" && "${gpu_lane[$id]}" != "$lane_no" ]]; then
                echo "lanes.sh: GPU $id is in lane ${gpu_lane[$id]} and lane $lane_no; give each lane GPUs of its own" >&2
                exit 2
            fi
            gpu_lane[$id]=$lane_no
        done
    done
done
mkdir -p "$R"
source bench/setup_gpu.sh > "$R/setup.txt" 2>&1
{ nvidia-smi -L; df -h /dev/shm; nproc; } >> "$R/setup.txt" 2>&1
# LANES_END (seconds from now, default 560): no step runs past it (each step's seconds are cut to what is left)
end_at=$(( $(date +%s) + ${LANES_END:-560} ))
left() { local want=$1 rest=$(( end_at - $(date +%s) )); echo $(( want < rest ? want : rest )); }
step() {
    local kind=$1 ids=$2; shift 2
    if [ "$kind" = nb ]; then
        local nb=$1 secs; secs=$(left "$2")
        (( secs > 30 )) || { echo "no time left for notebook $nb" >> "$R/lanes.txt"; return; }
        python3 bench/notebooks_gpu.py "$nb" --gpu-ids "$ids" --time-limit "$secs" --notebook-timeout "$secs" \
            --out "$R/gpu_notebooks_$nb.json" --log-dir "$R" > "$R/run_nb$nb.txt" 2>&1
    else
        local secs script=$2; secs=$(left "$1"); shift 2
        (( secs > 30 )) || { echo "no time left for $script" >> "$R/lanes.txt"; return; }
        # {left_s} / {left_min} in the arguments: the step's own time left, less a minute to write its results
        local args=() a; for a in "$@"; do
            a=${a//\{left_s\}/$(( secs - 60 ))}; args+=("${a//\{left_min\}/$(( (secs - 60) / 60 ))}"); done
        local log; log="$R/run_$(basename "${script%.py}").txt"  # probes/x.py logs to run_x.txt
        CUDA_VISIBLE_DEVICES=$ids timeout -k 10 "$secs" python3 "bench/$script" "${args[@]}" > "$log" 2>&1
        echo "exit $?" >> "$log"
    fi
}
for lane in "$@"; do
    (
        IFS=';' read -ra steps <<< "$lane"
        for s in "${steps[@]}"; do
            read -ra words <<< "$s"
            echo "$(date +%T) start: ${words[*]}" >> "$R/lanes.txt"
            step "${words[@]}"
            echo "$(date +%T) end: ${words[*]}" >> "$R/lanes.txt"
        done
    ) &
done
wait
