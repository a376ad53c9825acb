#!/usr/bin/env bash
# Shows that the tests behind the docs' claims fail when the behaviour they
# claim is broken: for each row of mutants.tsv (or only the names given), a
# copy of HEAD gets the row's patch, the row's test runs, and the run must
# fail printing the row's text. A mutant whose test passes, or fails for
# another reason, fails this script.
#
#   hack/mutants/run.sh                       # every mutant (about 45 min)
#   hack/mutants/run.sh argocd-suspend-in-git # one
#
# It uses the control-plane binaries `make test` built under bin/.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
dir=$root/hack/mutants
work=$(mktemp -d /tmp/openmed-mutant.XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

failed=0
while IFS=$'\t' read -r name pkg run want; do
	[[ -z $name || $name == \#* ]] && continue
	if (($# > 0)) && ! printf '%s\n' "$@" | grep -qx -- "$name"; then
		continue
	fi
	copy=$work/$name
	mkdir -p "$copy"
	git -C "$root" archive HEAD | tar -x -C "$copy"
	ln -s "$root/bin" "$copy/bin"
	(cd "$copy" && git apply "$dir/$name.patch")
	log=$work/$name.log
	start=$(date +%s)
	if (cd "$copy" && go test -count=1 -timeout 30m -v "$pkg" -run "$run") >"$log" 2>&1; then
		echo "SURVIVED $name: $pkg -run '$run' passed with the behaviour broken"
		failed=1
	elif grep -qF -- "$want" "$log"; then
		echo "killed   $name: $pkg -run '$run' failed in $(($(date +%s) - start)) s: $(grep -F -m1 -- "$want" "$log" | sed 's/^[[:space:]]*//' | cut -c1-160)"
	else
		echo "OTHER    $name: $pkg -run '$run' failed without \"$want\"; the end of its output:"
		grep -E -- '--- FAIL|_test.go:[0-9]+:' "$log" | tail -15
		failed=1
	fi
	rm -rf "$copy"
done <"$dir/mutants.tsv"
exit $failed
