# Sourced by the benches that run builds side by side (relay_lag.sh, write_cost.sh): their
# arguments, `DIR ROUNDS NAME=BINARY [NAME=BINARY ...] [-- bench options]`, and each round's
# order of the builds.

# Sets `dir` (emptied and made), `rounds`, `builds` and `options` from the arguments.
side_by_side_arguments() {
  dir=$(realpath -m "$1")
  rounds=$2
  shift 2
  builds=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    builds+=("$1")
    shift
  done
  [ "${1:-}" = "--" ] && shift
  [ ${#builds[@]} -gt 0 ] || { echo "name at least one build: NAME=BINARY" >&2; exit 2; }
  options=("$@")
  rm -rf "$dir"
  mkdir -p "$dir"
}

# Sets `order`, the builds in round ROUND's order: reversed every other round, so neither build
# always runs first (on a warmer or a quieter machine).
round_order() {
  order=("${builds[@]}")
  if [ $(($1 % 2)) = 0 ]; then
    order=()
    for ((i = ${#builds[@]} - 1; i >= 0; i--)); do order+=("${builds[$i]}"); done
  fi
}
