// openai_tools_model.mjs — the tool requests of openai_tools.mjs on a real model run: `nextn serve
// -m <the bundled model> --chat-template-file <Qwen3.5's template>` and the official `openai` npm
// client. The tiny model does not call tools, so what is checked is the prompt: for the Qwen3.5
// cases with tools in tests/data/chat/cases.json, POST /apply-template (the prompt the chat
// endpoint tokenizes) equals the reference rendering (expected.json) byte for byte, and the chat
// completion the client makes with those tools (streaming and not, greedy) counts the reference
// text's tokens as its prompt, answers as content (finish stop or length, no tool_calls), and
// streams the same text it returns whole.
// Usage: node openai_tools_model.mjs BASE_URL MODULE_DIR DATA_DIR. Prints ok/FAIL and "N passed, N failed".
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const [baseURL, moduleDir, dataDir] = process.argv.slice(2);
const require = createRequire(path.join(moduleDir, 'node_modules', 'x.js'));
const OpenAI = require('openai').default ?? require('openai');
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const cases = JSON.parse(readFileSync(path.join(dataDir, 'cases.json'), 'utf8'));
const expected = JSON.parse(readFileSync(path.join(dataDir, 'expected.json'), 'utf8'));

let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); console.log(`ok   ${name}`); passed++; } catch (e) { console.log(`FAIL ${name}: ${e && e.message ? e.message : e}`); failed++; }
}
function eq(a, b, what) {
  if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${what}: got ${JSON.stringify(a)}, want ${JSON.stringify(b)}`);
}
async function post(p, body) {
  const r = await fetch(`${baseURL}${p}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  if (r.status !== 200) throw new Error(`${p}: HTTP ${r.status}`);
  return r.json();
}

let n = 0;
for (let i = 0; i < cases.length; i++) {
  const c = cases[i];
  if (!c.template.includes('Qwen3.5') || !c.tools) continue;
  n++;
  await check(`${c.name}: /apply-template = the reference rendering, byte for byte`, async () => {
    const r = await post('/apply-template', { messages: c.messages, tools: c.tools });
    if (r.prompt !== expected[i].text) throw new Error(`differs from the reference (${r.prompt.length} vs ${expected[i].text.length} chars)`);
  });
  await check(`${c.name}: the client's chat completion with tools renders that prompt (streaming and not)`, async () => {
    const want = (await post('/tokenize', { content: expected[i].text, add_special: true, parse_special: true })).tokens.length;
    const req = { model: 'tiny', messages: c.messages, tools: c.tools, max_tokens: 6, temperature: 0 };
    const r = await client.chat.completions.create(req);
    eq(r.usage.prompt_tokens, want, 'prompt tokens (the reference text tokenized)');
    const ch = r.choices[0];
    if (!['stop', 'length'].includes(ch.finish_reason)) throw new Error(`finish_reason ${ch.finish_reason}`);
    eq(ch.message.tool_calls ?? null, null, 'tool_calls (the tiny model does not call tools)');
    let content = '', reasoning = '', finish, usage;
    for await (const k of await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
      if (k.usage) usage = k.usage;
      const d = k.choices[0]?.delta;
      if (!d) continue;
      content += d.content ?? ''; reasoning += d.reasoning_content ?? '';
      if (d.tool_calls) throw new Error('a tool call streamed');
      if (k.choices[0].finish_reason) finish = k.choices[0].finish_reason;
    }
    eq(usage?.prompt_tokens, want, 'streamed prompt tokens');
    eq([content, reasoning, finish], [ch.message.content ?? '', ch.message.reasoning_content ?? '', ch.finish_reason], 'the stream = the whole answer');
  });
}
if (n < 3) { console.log(`FAIL only ${n} Qwen3.5 cases with tools`); failed++; }
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
