// openai_client.mjs — drives `nextn serve --fake-backend` with the official `openai` npm client.
// Usage: node openai_client.mjs BASE_URL API_KEY MODULE_DIR
// The fake backend echoes the prompt's bytes with ASCII letters rot13'd (BOS skipped, then EOS),
// so every expected text is computed here from the ChatML rendering. Prints "ok   name" /
// "FAIL name: why" per check and "N passed, N failed" last; exit code 1 on any failure.
import { createRequire } from 'node:module';
import path from 'node:path';

const [baseURL, apiKey, moduleDir] = process.argv.slice(2);
const require = createRequire(path.join(moduleDir, 'node_modules', 'x.js'));
const OpenAI = require('openai').default ?? require('openai');

const rot13 = (s) => s.replace(/[a-zA-Z]/g, (c) => {
  const b = c <= 'Z' ? 65 : 97;
  return String.fromCharCode(((c.charCodeAt(0) - b + 13) % 26) + b);
});
const chatml = (msgs) => msgs.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';
const utf8len = (s) => Buffer.byteLength(s, 'utf8');

let passed = 0, failed = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
    passed++;
  } catch (e) {
    console.log(`FAIL ${name}: ${e && e.message ? e.message : e}`);
    failed++;
  }
}
function eq(a, b, what) {
  if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${what}: got ${JSON.stringify(a)}, want ${JSON.stringify(b)}`);
}

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 20000 });

await check('GET /v1/models lists the alias and the -slotN entries', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  eq(ids, ['fake', 'fake-slot0', 'fake-slot1'], 'model ids');
  const page = await client.models.list();
  const s1 = page.data.find((m) => m.id === 'fake-slot1');
  eq(s1.meta.slot_pinned, 1, 'meta.slot_pinned');
});

const msgs = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello, server! ünïcödé 🙂' }];
const prompt = chatml(msgs);

await check('chat completion: content, finish_reason, usage, timings', async () => {
  const r = await client.chat.completions.create({ model: 'fake', messages: msgs, temperature: 0 });
  eq(r.object, 'chat.completion', 'object');
  eq(r.choices.length, 1, 'choices');
  eq(r.choices[0].message.role, 'assistant', 'role');
  eq(r.choices[0].message.content, rot13(prompt), 'content');
  eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
  const n = utf8len(prompt) + 1;   // bytes + BOS
  eq(r.usage.prompt_tokens, n, 'usage.prompt_tokens');
  eq(r.usage.completion_tokens, utf8len(prompt) + 1, 'usage.completion_tokens');   // bytes + EOS
  eq(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, 'usage.total_tokens');
  if (typeof r.timings?.predicted_n !== 'number' || typeof r.timings?.draft_n !== 'number') throw new Error('timings missing');
});

await check('chat completion: max_tokens gives finish_reason length', async () => {
  const r = await client.chat.completions.create({ model: 'fake', messages: msgs, max_tokens: 7 });
  eq(r.choices[0].message.content, rot13(prompt).slice(0, 7), 'content');
  eq(r.choices[0].finish_reason, 'length', 'finish_reason');
  eq(r.usage.completion_tokens, 7, 'completion_tokens');
});

await check('streaming chat: deltas concatenate to the full answer, usage chunk last', async () => {
  const stream = await client.chat.completions.create({
    model: 'fake', messages: msgs, stream: true, stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, chunks = 0, role = null;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.delta?.role) role = ch.delta.role;
    if (ch.delta?.content) text += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  eq(role, 'assistant', 'first delta role');
  eq(text, rot13(prompt), 'streamed text');
  eq(finish, 'stop', 'finish_reason');
  if (!usage || usage.completion_tokens !== utf8len(prompt) + 1) throw new Error(`usage ${JSON.stringify(usage)}`);
  if (chunks < 10) throw new Error(`only ${chunks} chunks`);
});

await check('stop strings (chat, non-streaming and streaming)', async () => {
  const want = rot13(prompt);
  const stop = rot13('server');   // "freire": inside the echoed user message
  const cut = want.slice(0, want.indexOf(stop));
  const r = await client.chat.completions.create({ model: 'fake', messages: msgs, stop: [stop, 'never-there'] });
  eq(r.choices[0].message.content, cut, 'content');
  eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
  const s = await client.chat.completions.create({ model: 'fake', messages: msgs, stop, stream: true });
  let text = '';
  for await (const c of s) text += c.choices[0]?.delta?.content ?? '';
  eq(text, cut, 'streamed content');
});

await check('completions: text prompt, stop, usage', async () => {
  const r = await client.completions.create({ model: 'fake', prompt: 'The quick brown fox', max_tokens: 100, stop: ['oebja'] });
  eq(r.object, 'text_completion', 'object');
  eq(r.choices[0].text, 'Gur dhvpx ', 'text');
  eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
  eq(r.usage.prompt_tokens, 20, 'prompt_tokens');
});

await check('completions: streaming with a token-id prompt', async () => {
  const s = await client.completions.create({ model: 'fake-slot1', prompt: [65, 66, 67], max_tokens: 2, stream: true });
  let text = '';
  for await (const c of s) text += c.choices[0]?.text ?? '';
  eq(text, 'NO', 'text');
});

// logprobs in OpenAI's shapes (the fake reports log(0.75) for the chosen byte and n_probs alternatives).
function checkChatEntry(e, nTop, what) {
  if (typeof e.token !== 'string' || typeof e.logprob !== 'number' || !Array.isArray(e.bytes)) throw new Error(`${what}: ${JSON.stringify(e)}`);
  if (e.logprob > 0) throw new Error(`${what}: logprob ${e.logprob} > 0`);
  eq(Buffer.from(e.bytes).toString('utf8'), e.token, `${what}: bytes spell the token`);
  if (!Array.isArray(e.top_logprobs) || e.top_logprobs.length !== nTop) throw new Error(`${what}: top_logprobs ${JSON.stringify(e.top_logprobs)}`);
  for (const t of e.top_logprobs)
    if (typeof t.token !== 'string' || typeof t.logprob !== 'number' || !Array.isArray(t.bytes)) throw new Error(`${what}: top entry ${JSON.stringify(t)}`);
}

await check('chat logprobs: content entries {token, logprob, bytes, top_logprobs}', async () => {
  const m = [{ role: 'user', content: 'abc' }];
  const r = await client.chat.completions.create({ model: 'fake', messages: m, max_tokens: 6, logprobs: true, top_logprobs: 3 });
  const c = r.choices[0].logprobs?.content;
  if (!Array.isArray(c) || c.length !== 6) throw new Error(`content ${JSON.stringify(r.choices[0].logprobs)}`);
  c.forEach((e, i) => checkChatEntry(e, 3, `entry ${i}`));
  eq(c.map((e) => e.token).join(''), r.choices[0].message.content, 'tokens spell the message');
  const plain = await client.chat.completions.create({ model: 'fake', messages: m, max_tokens: 2 });
  eq(plain.choices[0].logprobs ?? null, null, 'logprobs absent unless asked');
  const s = await client.chat.completions.create({ model: 'fake', messages: m, max_tokens: 6, logprobs: true, top_logprobs: 1, stream: true });
  const got = [];
  for await (const ch of s) for (const e of ch.choices[0]?.logprobs?.content ?? []) got.push(e);
  eq(got.length, 6, 'streamed entries');
  got.forEach((e, i) => checkChatEntry(e, 1, `streamed entry ${i}`));
});

await check('completions logprobs: tokens, token_logprobs, top_logprobs, text_offset', async () => {
  const r = await client.completions.create({ model: 'fake', prompt: 'hello', max_tokens: 4, logprobs: 2 });
  const l = r.choices[0].logprobs;
  eq(l.tokens, ['u', 'r', 'y', 'y'], 'tokens');
  eq(l.text_offset, [0, 1, 2, 3], 'text_offset');
  if (l.token_logprobs.length !== 4 || l.token_logprobs.some((x) => typeof x !== 'number' || x > 0)) throw new Error(`token_logprobs ${l.token_logprobs}`);
  if (l.top_logprobs.length !== 4 || l.top_logprobs.some((o) => typeof o !== 'object' || Object.keys(o).length < 1 || Object.keys(o).length > 2))
    throw new Error(`top_logprobs ${JSON.stringify(l.top_logprobs)}`);
  const s = await client.completions.create({ model: 'fake', prompt: 'hello', max_tokens: 4, logprobs: 0, stream: true });
  const toks = [], offs = [];
  for await (const c of s) {
    const x = c.choices[0]?.logprobs;
    if (x) { toks.push(...x.tokens); offs.push(...x.text_offset); }
  }
  eq(toks, ['u', 'r', 'y', 'y'], 'streamed tokens');
  eq(offs, [0, 1, 2, 3], 'streamed text_offset');
});

await check('errors surface as APIError with status and message', async () => {
  try {
    await client.chat.completions.create({ model: 'fake', messages: msgs, n: 2 });
    throw new Error('no error');
  } catch (e) {
    if (!(e instanceof OpenAI.APIError) || e.status !== 400 || !/'n'/.test(e.message)) throw e;
  }
  const bad = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  try {
    await bad.models.list();
    throw new Error('no error');
  } catch (e) {
    if (!(e instanceof OpenAI.AuthenticationError)) throw e;
  }
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
