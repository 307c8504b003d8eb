#!/usr/bin/env bash
# Builds the Debian packages (tfckpt, python3-tfckpt, libtfckpt-dev) with dpkg-buildpackage
# from a copy of this tree, then unpacks them into an empty directory root and runs what was
# installed: `tfckpt --version`, `man -w tfckpt`, `python3 -c "import tfckpt"` (Debian's
# python3), and examples/read_checkpoint.cc built with the flags `pkg-config --cflags --libs
# tfckpt` gives for the unpacked libtfckpt-dev alone, run on real checkpoints.
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

# libtfckpt-dev ships every public header (include/tfckpt/*.h and the generated version.h),
# and no other package ships any of its files.
installed=$(cd "$root/usr/include/tfckpt" && ls | sort)
public=$( (cd include/tfckpt && ls -- *.h; echo version.h) | sort)
[ "$installed" = "$public" ] || {
  printf 'build-debs: libtfckpt-dev installs these headers:\n%s\nbut include/tfckpt holds:\n%s\n' "$installed" "$public" >&2
  exit 1
}
for deb in build-deb/*.deb; do
  case $deb in *libtfckpt-dev_*) continue ;; esac
  if dpkg-deb -c "$deb" | grep -E ' \./usr/(include/|lib/.*/(libtfckpt\.a|pkgconfig/))'; then
    echo "build-debs: $deb ships files of libtfckpt-dev" >&2
    exit 1
  fi
done

# The C++ library as a program sees it (docs/LIBRARY.md): pkg-config alone supplies the flags.
pc=$(find "$root/usr/lib" -path '*/pkgconfig/tfckpt.pc' | head -1)
[ -n "$pc" ] || { echo "build-debs: libtfckpt-dev holds no tfckpt.pc" >&2; exit 1; }
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --define-variable=prefix="$root/usr" --cflags --libs tfckpt)
# shellcheck disable=SC2086  # (the flags are words)
c++ -std=c++20 examples/read_checkpoint.cc -o "$work/read_checkpoint" $flags || {
  echo "build-debs: examples/read_checkpoint.cc does not build against libtfckpt-dev" >&2
  exit 1
}
# Every installed header compiles with those flags alone (none needs a header the package
# does not ship).
for h in "$root"/usr/include/tfckpt/*.h; do echo "#include \"tfckpt/${h##*/}\""; done >"$work/all_headers.cc"
# shellcheck disable=SC2086
c++ -std=c++20 -fsyntax-only "$work/all_headers.cc" $flags || {
  echo "build-debs: the headers of libtfckpt-dev do not compile on their own" >&2
  exit 1
}
testdata=$here/../shared/testdata/tf
if [ -d "$testdata" ]; then
  expect() {  # CKPT N LINE...: the example prints N lines on CKPT, each LINE among them
    local ckpt=$1 n=$2 out line
    shift 2
    out=$("$work/read_checkpoint" "$testdata/$ckpt") || { echo "build-debs: read_checkpoint $ckpt failed" >&2; exit 1; }
    [ "$(wc -l <<<"$out")" -eq "$n" ] || { printf 'build-debs: read_checkpoint %s printed not %s lines:\n%s\n' "$ckpt" "$n" "$out" >&2; exit 1; }
    for line in "$@"; do
      grep -qxF -- "$line" <<<"$out" || { printf 'build-debs: read_checkpoint %s printed no line "%s":\n%s\n' "$ckpt" "$line" "$out" >&2; exit 1; }
    done
    echo "read_checkpoint $ckpt (built against libtfckpt-dev): $n lines, the first and the last:"
    printf '%s\n' "$out" | sed -n '1p;$p'
  }
  tab=$'\t'
  # 18 tensors and the first element of the first float32 tensor.
  expect keras_tf2_adam_2shards 19 "_CHECKPOINTABLE_OBJECT_GRAPH${tab}string${tab}[]" \
    "layer-1/kernel/.ATTRIBUTES/VARIABLE_VALUE${tab}float32${tab}[4, 128]" \
    "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE${tab}int64${tab}[]" \
    "layer-1/bias/.ATTRIBUTES/VARIABLE_VALUE[0] = 0"
  expect savedmodel_tf1_snappy_index/variables/variables 6 "a${tab}float32${tab}[]" "a[] = 0.5"
elif [ "${CI:-}" = "true" ]; then
  echo "build-debs: ../shared/testdata/tf is missing under CI=true" >&2
  exit 1
else
  echo "build-debs: no ../shared/testdata/tf: read_checkpoint built, not run" >&2
fi
echo "build-debs: ok"
