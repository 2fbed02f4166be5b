#!/usr/bin/env node
// Convert the JSON builds of the npm package nlp-corpus (4.4.0) into fca's plain-text layout:
//   OUT/train.txt, OUT/valid.txt, OUT/test.txt
//
// Usage: node scripts/convert_corpus.js SRC_BUILDS_DIR OUT_DIR
//
// Input: SRC_BUILDS_DIR holds doc-<N>.json, N = 0..K-1 contiguous; each file is a JSON array of
// strings (1,000 sentences per file in 4.4.0). Anything else in the folder is an error, so that a
// different package version cannot be converted silently.
//
// Rules (see docs/data.md; the output bytes are pinned by scripts/fetch_corpus.sh):
// - Document = one build file doc-<N>.json. Documents are ordered by N (numeric).
// - Split: N % 20 == 18 -> valid, N % 20 == 19 -> test, otherwise train (90 / 5 / 5 documents).
// - Entry = one string of the array. Line breaks inside an entry (CRLF, CR, LF, VT, FF, U+0085,
//   U+2028, U+2029) become one space each; then leading/trailing whitespace is trimmed
//   (String.prototype.trim). Entries that are empty after this are dropped. Nothing else is
//   changed (no Unicode normalisation, internal spacing kept). Lone UTF-16 surrogates, if any,
//   become U+FFFD.
// - Output: each entry is one line ending in "\n"; documents are separated by one blank line
//   ("\n\n" between the last entry of one document and the first entry of the next). Files are
//   UTF-8 without BOM and end with a single "\n".
//
// Only node's standard library is used. The modules are loaded with dynamic import() so the script
// runs the same whether node treats this file as CommonJS or as an ES module.
'use strict';

async function main() {
  const fs = await import('node:fs');
  const path = await import('node:path');

  const fail = (msg) => {
    process.stderr.write(`convert_corpus: ${msg}\n`);
    process.exit(1);
  };

  const args = process.argv.slice(2);
  if (args.length !== 2) fail('usage: node convert_corpus.js SRC_BUILDS_DIR OUT_DIR');
  const [src, out] = args;

  let names;
  try {
    names = fs.readdirSync(src);
  } catch (e) {
    fail(`cannot read ${src}: ${e.message}`);
  }
  const docs = [];
  for (const name of names) {
    const m = /^doc-(0|[1-9][0-9]*)\.json$/.exec(name);
    if (!m) fail(`unexpected entry in ${src}: ${name} (expected only doc-<N>.json)`);
    docs.push({ n: Number(m[1]), name });
  }
  if (docs.length === 0) fail(`no doc-<N>.json files in ${src}`);
  docs.sort((a, b) => a.n - b.n);
  docs.forEach((d, i) => {
    if (d.n !== i) fail(`document numbers are not contiguous from 0: missing doc-${i}.json in ${src}`);
  });

  const splitOf = (n) => (n % 20 === 18 ? 'valid' : n % 20 === 19 ? 'test' : 'train');
  const lineBreaks = /\r\n|[\n\r\u000b\u000c\u0085\u2028\u2029]/g;
  const loneSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

  const parts = { train: [], valid: [], test: [] };
  const stats = {};
  for (const s of Object.keys(parts)) stats[s] = { docs: 0, entries: 0, dropped: 0 };
  let replacedSurrogates = 0;

  for (const d of docs) {
    const file = path.join(src, d.name);
    let arr;
    try {
      arr = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (e) {
      fail(`cannot parse ${file}: ${e.message}`);
    }
    if (!Array.isArray(arr)) fail(`${file}: expected a JSON array of strings`);
    const split = splitOf(d.n);
    const lines = [];
    arr.forEach((entry, i) => {
      if (typeof entry !== 'string') fail(`${file}: element ${i} is not a string`);
      let t = entry.replace(lineBreaks, ' ').trim();
      t = t.replace(loneSurrogate, () => {
        replacedSurrogates += 1;
        return '\ufffd';
      });
      if (t === '') {
        stats[split].dropped += 1;
        return;
      }
      lines.push(t + '\n');
    });
    if (lines.length === 0) fail(`${file}: no non-empty entries`);
    parts[split].push(lines.join(''));
    stats[split].docs += 1;
    stats[split].entries += lines.length;
  }

  try {
    fs.mkdirSync(out, { recursive: true });
  } catch (e) {
    fail(`cannot create ${out}: ${e.message}`);
  }
  for (const split of Object.keys(parts)) {
    if (parts[split].length === 0) fail(`split ${split} would be empty (only ${docs.length} documents)`);
    const buf = Buffer.from(parts[split].join('\n'), 'utf8');
    const dest = path.join(out, `${split}.txt`);
    const tmp = `${dest}.tmp-${process.pid}`;
    try {
      fs.writeFileSync(tmp, buf);
      fs.renameSync(tmp, dest);
    } catch (e) {
      try { fs.unlinkSync(tmp); } catch (_) { /* ignore */ }
      fail(`cannot write ${dest}: ${e.message}`);
    }
    const st = stats[split];
    process.stdout.write(
      `convert_corpus: ${split}.txt ${buf.length} bytes, ${st.docs} documents, ${st.entries} entries` +
        (st.dropped ? `, ${st.dropped} empty entries dropped` : '') + '\n');
  }
  if (replacedSurrogates) {
    process.stdout.write(`convert_corpus: replaced ${replacedSurrogates} lone surrogates with U+FFFD\n`);
  }
}

main().catch((e) => {
  process.stderr.write(`convert_corpus: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
