#!/usr/bin/env bash
# Shows that the tests behind the docs' claims fail when the behaviour they
# claim is broken: for each row of mutants.tsv (or only the names given), a
# copy of HEAD gets the row's patch, the row's test runs, and the run must
# fail printing the row's text. A mutant whose test passes, or fails for
# another reason, fails this script.
#
# The text must be the targeted assertion's own: before the mutants, each
# test the selected rows name runs once on HEAD as it is; it must pass, and
# none of the rows' texts may appear in its output (a text every run prints,
# or every timeout, would count any failure as the mutant's).
#
#   hack/mutants/run.sh                       # every mutant (about an hour)
#   hack/mutants/run.sh --fast                # the rows marked fast (make test)
#   hack/mutants/run.sh argocd-suspend-in-git # one
#
# It uses the control-plane binaries `make test` built under bin/.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
dir=$root/hack/mutants
fast=0
if [[ ${1:-} == --fast ]]; then
	fast=1
	shift
fi
work=$(mktemp -d /tmp/openmed-mutant.XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# The rows to run: name, package, -run, text (tab-separated).
rows=()
while IFS=$'\t' read -r name pkg run want speed; do
	[[ -z $name || $name == \#* ]] && continue
	if [[ $speed != fast && $speed != slow ]]; then
		echo "mutants.tsv: $name: the fifth column must be fast or slow, not \"$speed\"" >&2
		exit 2
	fi
	if (($# > 0)); then
		printf '%s\n' "$@" | grep -qx -- "$name" || continue
	elif ((fast)) && [[ $speed != fast ]]; then
		continue
	fi
	rows+=("$name"$'\t'"$pkg"$'\t'"$run"$'\t'"$want")
done <"$dir/mutants.tsv"
if ((${#rows[@]} == 0)); then
	echo "no mutant selected" >&2
	exit 2
fi

# Every row's patch, selected or not, must still apply to the tree: a
# slow mutant whose patch went stale would otherwise show nothing until
# someone runs it.
stale=0
while IFS=$'\t' read -r name _; do
	[[ -z $name || $name == \#* ]] && continue
	if ! git -C "$root" apply --check "$dir/$name.patch" 2>/dev/null; then
		echo "STALE    $name: hack/mutants/$name.patch no longer applies; break the behaviour again and regenerate it" >&2
		stale=1
	fi
done <"$dir/mutants.tsv"
if ((stale)); then
	exit 2
fi

# Every copy is made at the same path, so that the build cache serves the
# packages a patch does not touch.
src=$work/src
checkout() {
	rm -rf "$src"
	mkdir -p "$src"
	git -C "$root" archive HEAD | tar -x -C "$src"
	ln -s "$root/bin" "$src/bin"
}
# The copies have no .git: a test that reads this repository's history (the
# upgrade test builds the previous release) finds it here.
OPENMED_GIT_DIR=$(git -C "$root" rev-parse --absolute-git-dir)
export OPENMED_GIT_DIR
runtest() { # package, -run, log
	(cd "$src" && go test -count=1 -timeout 30m -v "$1" -run "$2") >"$3" 2>&1
}

# failures prints a failed run's assertions, or the end of its output when
# it printed none (a build error, a panic, a timeout).
failures() {
	if grep -qE -- '--- FAIL|_test.go:[0-9]+:' "$1"; then
		grep -E -- '--- FAIL|_test.go:[0-9]+:' "$1" | tail -15
	else
		tail -15 "$1"
	fi
}

failed=0
start=$(date +%s)
# The passing runs, one per test the rows name.
declare -A baseline=()
baselines=0
for row in "${rows[@]}"; do
	IFS=$'\t' read -r name pkg run want <<<"$row"
	key="$pkg $run"
	[[ -n ${baseline[$key]:-} ]] && continue
	baselines=$((baselines + 1))
	log=$work/baseline.$baselines.log
	baseline[$key]=$log
	checkout
	if ! runtest "$pkg" "$run" "$log"; then
		echo "BASELINE $pkg -run '$run' fails on HEAD as it is; the end of its output:"
		failures "$log"
		failed=1
	fi
done

for row in "${rows[@]}"; do
	IFS=$'\t' read -r name pkg run want <<<"$row"
	if grep -qF -- "$want" "${baseline[$pkg $run]}"; then
		echo "UNSURE   $name: \"$want\" is printed by the passing run of $pkg -run '$run' too: $(grep -F -m1 -- "$want" "${baseline[$pkg $run]}" | sed 's/^[[:space:]]*//' | cut -c1-160)"
		failed=1
		continue
	fi
	checkout
	(cd "$src" && git apply "$dir/$name.patch")
	log=$work/$name.log
	began=$(date +%s)
	if runtest "$pkg" "$run" "$log"; then
		echo "SURVIVED $name: $pkg -run '$run' passed with the behaviour broken"
		failed=1
	elif grep -qF -- "$want" "$log"; then
		echo "killed   $name: $pkg -run '$run' failed in $(($(date +%s) - began)) s: $(grep -F -m1 -- "$want" "$log" | sed 's/^[[:space:]]*//' | cut -c1-160)"
	else
		echo "OTHER    $name: $pkg -run '$run' failed without \"$want\"; the end of its output:"
		failures "$log"
		failed=1
	fi
done
echo "${#rows[@]} mutants, $baselines passing runs, $(($(date +%s) - start)) s"
exit $failed
