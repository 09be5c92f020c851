# python_of X.Y: the path of a CPython X.Y that can make a venv: Debian's /usr/bin/pythonX.Y, one on PATH, or one
# of pyenv's (this machine kind has 3.12 and 3.13 only there). Sourced by scripts/wheels.sh and the wheels' test.
python_of() {
  local found
  for found in "/usr/bin/python$1" "$(command -v "python$1" || true)" \
               "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/"python$1"; do
    if [ -x "$found" ] && "$found" -c 'import venv, ensurepip' 2>/dev/null; then
      echo "$found"
      return
    fi
  done
  echo "no CPython $1 found (/usr/bin, PATH, ${PYENV_ROOT:-$HOME/.pyenv}/versions)" >&2
  return 1
}
