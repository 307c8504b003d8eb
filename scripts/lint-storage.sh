#!/usr/bin/env bash
# Checks that nothing in the library, the commands or the Python module touches files except
# through the Storage layer (include/tfckpt/storage.h): the file system calls below may
# appear only in the local implementation, src/kvstore/local/; and that outside the stores
# (src/kvstore/) no path is resolved to its store again: Storage::For only there, the rest
# resolve once with Location::Of and pass the Location down.
#
#   scripts/lint-storage.sh [ROOT]    ROOT: the source tree to check (default: this one)
#
# Prints one line per violation (FILE:LINE: the code) and exits 1 when there is any, else
# exits 0. // comments are ignored; names that merely contain a call's name (Open(, zip_open(,
# x.open(, std::ios) are not violations.
set -euo pipefail
root=${1:-"$(dirname "$0")/.."}
cd "$root"

# A C or POSIX file call: its name as a whole word (not after a letter, digit, _, . or >,
# so not a member or another name), directly followed by "(".
calls='open|openat|creat|fopen|mmap|munmap|madvise|pread|pwrite|rename|renameat|link|unlink|unlinkat|stat|lstat|fstat|mkdir|rmdir|opendir|glob|realpath|truncate|copy_file_range|posix_fadvise|sync_file_range'
pattern="(^|[^A-Za-z0-9_.>])(${calls})\(|std::filesystem|(^|[^A-Za-z0-9_])fs::|<filesystem>|(^|[^A-Za-z0-9_])(i|o)?fstream\b"

# Prints FILE:LINE: the code for each line matching the extended regex $1 in the sources of
# src/ and python/tfckpt/ outside the folder $2 (// comments dropped, line numbers kept);
# returns 1 when there is any.
scan() {
  local found=0 file hits hit
  while IFS= read -r -d '' file; do
    hits=$(sed -e 's|//.*$||' "$file" | grep -nE "$1" || true)
    if [ -n "$hits" ]; then
      while IFS= read -r hit; do
        echo "$file:$hit"
      done <<<"$hits"
      found=1
    fi
  done < <(find src python/tfckpt -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cpp' \) \
             -not -path "$2/*" -print0 2>/dev/null | sort -z)
  return "$found"
}

status=0
if ! scan "$pattern" src/kvstore/local; then
  echo "lint-storage: file system calls outside src/kvstore/local/: go through Storage (include/tfckpt/storage.h)" >&2
  status=1
fi
# A path is resolved to its store once, where it comes in (Location::Of), and passed down as
# a Location: Storage::For, which resolves a path again, is the stores' own (src/kvstore/).
if ! scan '(^|[^A-Za-z0-9_])Storage::For\(' src/kvstore; then
  echo "lint-storage: Storage::For outside src/kvstore/: resolve a path once with Location::Of and pass the Location" >&2
  status=1
fi
exit "$status"
