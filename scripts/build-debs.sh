#!/usr/bin/env bash
# Builds the Debian packages (tfckpt, python3-tfckpt) with dpkg-buildpackage from a copy of
# this tree, then unpacks them into an empty directory root and runs what was installed:
# `tfckpt --version`, `man -w tfckpt`, `python3 -c "import tfckpt"` (Debian's python3).
# The .deb files end up in build-deb/.
# Usage: scripts/build-debs.sh      (root, or sudo, to install the build dependencies)
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD

scripts/install-deps.sh
tools=(debhelper dh-python dpkg-dev man-db)
missing=()
for p in "${tools[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "build-debs: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

work=$(mktemp -d /tmp/tfckpt-deb-XXXXXX)
trap 'rm -rf "$work"' EXIT
# The version is meson.build's (the one place it is written): debian/changelog is made
# from debian/changelog.in with it.
version=$(meson introspect --projectinfo meson.build | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
[ -n "$version" ] || { echo "build-debs: no version in meson.build" >&2; exit 1; }
src=$work/tfckpt-$version
mkdir -p "$src"
# The tracked files as they are in the working tree (no build directories).
git ls-files -z | xargs -0 cp --parents -t "$src"
sed "s/@VERSION@/$version/" debian/changelog.in >"$src/debian/changelog"
# Under CI the packages are built without optimisation or debug information: the check is
# that they build, install and run, and a full optimised build would cost CI minutes.
if [ "${CI:-}" = "true" ]; then
  export DEB_BUILD_OPTIONS="noopt nocheck ${DEB_BUILD_OPTIONS:-}" DEB_CXXFLAGS_STRIP="-g" DEB_CFLAGS_STRIP="-g"
fi
(cd "$src" && dpkg-buildpackage -b -us -uc >"$work/build.log" 2>&1) || {
  tail -40 "$work/build.log" >&2
  echo "build-debs: dpkg-buildpackage failed" >&2
  exit 1
}
rm -rf build-deb
mkdir -p build-deb
cp "$work"/*.deb build-deb/
ls build-deb

# Install into a clean root and run from there.
root=$work/root
for deb in build-deb/*.deb; do dpkg -x "$deb" "$root"; done
[ "$("$root/usr/bin/tfckpt" --version)" = "tfckpt $version" ] || { echo "build-debs: tfckpt --version is not $version" >&2; exit 1; }
"$root/usr/bin/tfckpt" --version
MANPATH=$root/usr/share/man man -w tfckpt
site=$(find "$root/usr/lib" -type d -name tfckpt -path '*-packages/*' | head -1)
[ -n "$site" ] || { echo "build-debs: python3-tfckpt holds no tfckpt package" >&2; exit 1; }
(cd / && PYTHONPATH=$(dirname "$site") /usr/bin/python3 -c "import tfckpt, sys; print('import tfckpt:', tfckpt.__file__)")
example=$work/example
"$here/build/examples/make_example" "$example/model.ckpt" >/dev/null 2>&1 || true
if [ -f "$example/model.ckpt.index" ]; then
  "$root/usr/bin/tfckpt" validate "$example/model.ckpt" >/dev/null
  (cd / && PYTHONPATH=$(dirname "$site") /usr/bin/python3 -c \
    "import tfckpt; c = tfckpt.open('$example/model.ckpt'); print('read', len(c), 'tensors from the installed package')")
fi
echo "build-debs: ok"
