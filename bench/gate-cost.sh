#!/usr/bin/env bash
# What the test gate of merges costs (issue 39, "Done when"): the same team run with and
# without `[merge] test`, on the demo (`examples/demo`, its bash tests, replayed from its
# cassette) and on a small Rust crate (`cargo test --offline`, serde as its dependency, two
# teammates scripted by fake-llm): the crate's gate once with a cold build directory in each
# scratch tree, once with the shared `cache = ["target"]`.
#
#   cargo build --release -p muster -p muster-fake-llm
#   bench/gate-cost.sh [REPEATS]      # 3 by default; SCENARIOS="rust-cold rust-cache" picks
#
# Prints one line per run: the scenario, the run's wall time, and the seconds of each gate run
# recorded in the merge requests (`tested.seconds`; an apply-time re-gate on a moved head is
# not recorded there, but is in the wall time). Every run is a fresh copy of its project, so
# the shared cache starts empty: the first gate of a cached run builds it, later ones reuse
# it. Offline: the crate's dependencies must be in the local cargo registry cache.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
muster=${MUSTER:-$here/target/release/muster}
fake_llm=${FAKE_LLM:-$here/target/release/fake-llm}
repeats=${1:-3}
for tool in "$muster" "$fake_llm"; do
    [ -x "$tool" ] || { echo "missing $tool: cargo build --release -p muster -p muster-fake-llm" >&2; exit 2; }
done
command -v jq >/dev/null || { echo "needs jq" >&2; exit 2; }

work=$(mktemp -d)
fake_pid=
cleanup() {
    [ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
# A fresh HOME (no user settings, its own trust file); cargo and rustup keep theirs.
export CARGO_HOME=${CARGO_HOME:-$HOME/.cargo} RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
export HOME=$work/home XDG_CONFIG_HOME=$work/home/.config ANTHROPIC_API_KEY=${ANTHROPIC_API_KEY:-bench-key}
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@muster.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@muster.invalid
mkdir -p "$HOME"

now() { date +%s.%N; }

commit_all() {
    git -C "$1" init -q -b main
    git -C "$1" add -A
    git -C "$1" commit -q --no-gpg-sign -m start
}

# The seconds of each gate run recorded in the lead's merge requests, space-separated.
gate_seconds() {
    "$muster" -C "$1" inbox lead --json |
        jq -r '[.[] | .message.body | select(.type == "merge_request") | .tested.seconds // empty
                | (. * 100 | round / 100)] | map(tostring) | join(" ")'
}

# run NAME DIR ARGS...: one run in DIR, its line printed.
run() {
    local name=$1 dir=$2
    shift 2
    local started ended status
    started=$(now)
    status=0
    (cd "$dir" && "$muster" run "$@" --output stream-json >"$dir.events" 2>"$dir.err") || status=$?
    ended=$(now)
    printf '%-12s exit %d  wall %6.2fs  gates [%s]\n' "$name" "$status" \
        "$(echo "$ended - $started" | bc)" "$(gate_seconds "$dir")"
    if [ "$status" -ne 0 ]; then
        tail -5 "$dir.err" >&2
    fi
}

# ---- the demo: its team and cassette, with and without the gate on its tests
demo_goal="Make slugify collapse repeated dashes, and make titlecase keep small words lowercase."
demo() {
    local name=$1 gate=$2 dir=$work/$1-$3
    cp -a "$here/examples/demo" "$dir"
    if [ "$gate" = yes ]; then
        printf '\n[merge]\ntest = "bash tests/run.sh"\n' >>"$dir/muster.team.toml"
    fi
    commit_all "$dir"
    "$muster" -C "$dir" trust </dev/null >/dev/null
    run "$name" "$dir" -p "$demo_goal" --provider script --cassette "$dir/cassette.jsonl"
}

# ---- a Rust crate: two teammates each add a file; the gate runs `cargo test --offline`
writer='---
name: writer
description: Writes files.
permissionMode: acceptEdits
---
You write files.
'
crate() {
    local name=$1 gate=$2 dir=$work/$1-$3
    mkdir -p "$dir/src" "$dir/.muster/agents"
    printf '%s' "$writer" >"$dir/.muster/agents/writer.md"
    cat >"$dir/Cargo.toml" <<'EOF'
[package]
name = "gated"
version = "0.1.0"
edition = "2021"

[dependencies]
serde = { version = "1", features = ["derive"] }
serde_json = "1"
EOF
    cat >"$dir/src/lib.rs" <<'EOF'
#[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
pub struct Point {
    pub x: i32,
    pub y: i32,
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_point_survives_json() {
        let p = super::Point { x: 1, y: 2 };
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<super::Point>(&text).unwrap(), p);
    }
}
EOF
    printf 'target/\n' >"$dir/.gitignore"
    (cd "$dir" && cargo generate-lockfile --offline -q)
    {
        printf 'name = "builders"\nisolation = "worktree"\n'
        case $gate in
        cold) printf '\n[merge]\ntest = "cargo test --offline -q"\ntest_timeout = 600\n' ;;
        cache) printf '\n[merge]\ntest = "cargo test --offline -q"\ntest_timeout = 600\ncache = ["target"]\n' ;;
        esac
        for mate in one two; do
            printf '\n[[teammates]]\nname = "%s"\ndefinition = "writer"\nplan_mode_required = false\napprover = "lead"\n' "$mate"
        done
    } >"$dir/muster.team.toml"
    commit_all "$dir"
    "$muster" -C "$dir" trust </dev/null >/dev/null
    run "$name" "$dir" -p "Build it." --base-url "$base"
}

script=$work/script.json
cat >"$script" <<'EOF'
[
  {"agent": "lead", "when": {"mail_type": "merge_request"},
   "reply": {"content": [
     {"type": "tool_use", "name": "ReviewMerge", "input": {"request_id": "merge-one-1", "approve": true}},
     {"type": "tool_use", "name": "ReviewMerge", "input": {"request_id": "merge-two-1", "approve": true}}],
     "stop_reason": "tool_use"}},
  {"agent": "lead", "turn": 1,
   "reply": {"content": [
     {"type": "tool_use", "name": "TaskCreate", "input": {"subject": "part 0", "description": "Write your file."}},
     {"type": "tool_use", "name": "TaskCreate", "input": {"subject": "part 1", "description": "Write your file."}}],
     "stop_reason": "tool_use"}},
  {"agent": "lead", "reply": {"content": [{"type": "text", "text": "Waiting for the team."}], "stop_reason": "end_turn"}},
  {"agent": "one", "turn": 1, "reply": {"content": [{"type": "tool_use", "name": "Write", "input": {"file_path": "one.txt", "content": "one\n"}}], "stop_reason": "tool_use"}},
  {"agent": "two", "turn": 1, "reply": {"content": [{"type": "tool_use", "name": "Write", "input": {"file_path": "two.txt", "content": "two\n"}}], "stop_reason": "tool_use"}},
  {"agent": "one", "reply": {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}},
  {"agent": "two", "reply": {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}}
]
EOF
"$fake_llm" serve --addr 127.0.0.1:0 --script "$script" --no-auth >"$work/fake.out" &
fake_pid=$!
until [ -s "$work/fake.out" ]; do sleep 0.05; done
base=$(head -1 "$work/fake.out")

echo "# $(date -u +%FT%TZ)  $(nproc) cores  load: $(cut -d' ' -f1-3 /proc/loadavg)"
scenarios=${SCENARIOS:-demo-ungated demo-gated rust-ungated rust-cold rust-cache}
for i in $(seq "$repeats"); do
    for scenario in $scenarios; do
        case $scenario in
        demo-ungated) demo "$scenario" no "$i" ;;
        demo-gated) demo "$scenario" yes "$i" ;;
        rust-ungated) crate "$scenario" none "$i" ;;
        rust-cold) crate "$scenario" cold "$i" ;;
        rust-cache) crate "$scenario" cache "$i" ;;
        *) echo "unknown scenario $scenario" >&2; exit 2 ;;
        esac
    done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
