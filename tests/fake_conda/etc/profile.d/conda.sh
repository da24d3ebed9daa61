# The fake conda's etc/profile.d/conda.sh, shaped like conda's own: a
# `conda` function that evaluates what `conda shell.posix activate` prints,
# and passes everything else to the executable.
export CONDA_EXE="${CONDA_EXE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/bin/conda}"

__conda_exe() (
    "$CONDA_EXE" "$@"
)

__conda_activate() {
    local ask_conda
    ask_conda="$(PS1="${PS1:-}" __conda_exe shell.posix "$@")" || return
    eval "$ask_conda"
    hash -r
}

conda() {
    local cmd="${1-__missing__}"
    case "$cmd" in
    activate | deactivate) __conda_activate "$@" ;;
    *) __conda_exe "$@" ;;
    esac
}
