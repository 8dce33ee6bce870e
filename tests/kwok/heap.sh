#!/usr/bin/env bash
# Where the agent's memory goes: runs tests/kwok/scale.sh N with the agent under heaptrack and
# prints the heap at its peak, grouped by what holds it (each watched kind's store, the
# scheduler's input, the disruption pass, HTTP buffers, list pages, metrics...). A figure, not a
# test.
#
# The agent is built on glibc's malloc for this (`--features system-allocator`: heaptrack
# records malloc, and mimalloc would hide the allocations in its own pages) as a debug build, so
# every frame has a name. Needs heaptrack and heaptrack_print (`apt-get install heaptrack`).
#
# Usage: tests/kwok/heap.sh [N]      (default 5000; POD_CPU, INSTANCE_TYPES, RUN_TIMEOUT and
#                                      the rest pass through to scale.sh)
# e.g.   POD_CPU=400m INSTANCE_TYPES=m5.large tests/kwok/heap.sh 5000
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
n="${1:-5000}"
for tool in heaptrack heaptrack_print; do
  command -v "$tool" >/dev/null || { echo "heap.sh: $tool not found; install heaptrack (apt-get install heaptrack)" >&2; exit 1; }
done

out="$(mktemp -d /tmp/karpenter-heap-XXXXXX)"
cargo build --quiet -p karpenter-agent --features system-allocator
# A copy: the next `cargo build` without the feature replaces target/debug/karpenter-agent.
cp "${CARGO_TARGET_DIR:-target}/debug/karpenter-agent" "$out/agent"
# scale.sh runs `$AGENT_BIN crds` and `$AGENT_BIN run ...`, and stops the agent with SIGTERM:
# the wrapper runs only `run` under heaptrack and hands the signal to the agent, so heaptrack
# writes its data when the agent exits.
cat >"$out/wrapper" <<EOF
#!/usr/bin/env bash
[[ "\$1" == run ]] || exec "$out/agent" "\$@"
heaptrack -o "$out/agent" "$out/agent" "\$@" >"$out/agent.log" 2>&1 &
h=\$!
trap 'pkill -TERM -f "^$out/agent run"; wait \$h' TERM INT
wait \$h
EOF
chmod +x "$out/wrapper"
# The RSS figures scale.sh prints are the wrapper's, not the agent's: leave them out.
AGENT_BIN="$out/wrapper" AGENT_ARGS="${AGENT_ARGS:---leader-elect=false}" RUN_TIMEOUT="${RUN_TIMEOUT:-1500}" \
  tests/kwok/scale.sh "$n" | grep -v -e 'RSS' -e '^status:' || true

heaptrack_print -f "$out/agent.zst" --print-peaks 0 --print-allocators 0 --print-temporary 0 \
  --print-leaks 0 --flamegraph-cost-type peak -F "$out/peak.stacks" >"$out/summary.txt" 2>&1
grep -E 'peak heap memory consumption|calls to allocation functions|total runtime' "$out/summary.txt"
python3 - "$out/peak.stacks" <<'PY'
import collections, sys

# What holds memory at the peak: the first rule whose every part matches some frame of the
# allocation's stack (each part: any of its spellings, as Rust symbols spell paths two ways).
rules = [
    ("store: Nodes", [["apply_watcher_event"], ["CachedNode$u20$as$u20$core..clone", "node..Node$u20$as$u20$core..clone"]]),
    ("store: NodeClaims", [["apply_watcher_event"], ["NodeClaim$u20$as$u20$core..clone"]]),
    ("store: pods", [["apply_watcher_event"], ["CachedPod$u20$as$u20$core..clone"]]),
    ("stores: other kinds, and every cached object's Arc", [["apply_watcher_event"]]),
    ("strings shared among cached Nodes and metric series", [["interner"]]),
    ("specs, labels and owners shared among replicas", [["ReplicaParts", "pod_cache"]]),
    ("kwok provider: listing its Nodes", [["karpenter_core::cloud::kwok", "karpenter_core..cloud..kwok"], ["list"]]),
    ("disruption pass", [["karpenter_core::disruption::", "karpenter_core..disruption..", "controllers::disruption"]]),
    ("scheduling input", [["scheduling_input"]]),
    ("scheduler", [["karpenter_core::scheduling::", "karpenter_core..scheduling.."]]),
    ("lifecycle controller", [["controllers::lifecycle", "controllers..lifecycle"]]),
    ("metrics", [["prometheus_client"]]),
    ("event recorder", [["kube_runtime::events", "kube_runtime..events"]]),
    ("watch events being decoded", [["serde_json"]]),
    ("HTTP connections and buffers", [["hyper", "h2::", "rustls"]]),
]
totals = collections.Counter()
total = 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    n = int(n)
    total += n
    name = next((name for name, parts in rules
                 if all(any(s in stack for s in part) for part in parts)), "other")
    totals[name] += n
print(f"heap at its peak: {total / 2**20:.1f} MiB")
for name, n in totals.most_common():
    print(f"  {n / 2**20:7.1f} MiB  {name}")
PY
echo "heaptrack data: $out/agent.zst (heaptrack --analyze it for the full picture)"
