#!/usr/bin/env bash
# Download, here, the wheels the GPU machine's image lacks (pydantic and its parts), for its
# Python 3.12 on x86-64, into .whl/ (ignored by git); run_on_device.sh installs them there offline.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
for req in "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0" "typing-inspection==0.4.5"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl "$req"
done
ls -1 .whl
