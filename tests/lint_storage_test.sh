#!/usr/bin/env bash
# scripts/lint-storage.sh must fail on a file system call planted outside the local storage,
# name its file and line, and pass names that only look like one (and the local storage).
set -euo pipefail
lint=$1
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/src/cli" "$tree/src/kvstore/local" "$tree/python/tfckpt"
cat >"$tree/src/cli/clean.cc" <<'CC'
// rename() and open() in a comment, std::filesystem too.
auto f = Location::Of(p).OpenForRead();  // Open( is ours; Storage::For( in a comment
auto g = MyStorage::For(p);
zip_t* za = zip_open(path.c_str(), 0, &err);
std::ios::fmtflags flags;
stream.open(x); ptr->rename(y);
CC
cat >"$tree/src/kvstore/local/local.cc" <<'CC'
int fd = ::open(path, O_RDONLY);
namespace fs = std::filesystem;
CC
mkdir -p "$tree/src/kvstore"
echo 'Storage& s = Storage::For(path);' >"$tree/src/kvstore/storage.cc"
"$lint" "$tree" || { echo "FAIL: lint rejected a clean tree"; exit 1; }

fail() { echo "FAIL: $*"; exit 1; }
for planted in '  if (::rename(a, b) != 0) return;' 'std::ifstream in(path);' 'for (auto& e : fs::directory_iterator(d)) {}' \
               'void* p = mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);' '#include <filesystem>' \
               '  Storage& store = Storage::For(prefix);'; do
  printf 'int x;\n%s\n' "$planted" >"$tree/python/tfckpt/_core.cc"
  if out=$("$lint" "$tree" 2>/dev/null); then fail "lint passed a tree with: $planted"; fi
  [[ $out == "python/tfckpt/_core.cc:2:"* ]] || fail "lint did not name the file and line of '$planted': $out"
done
echo "1 passed, 0 failed"
