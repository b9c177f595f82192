// openai_tools.mjs — a tool round trip through `nextn serve --fake-backend --chat-template-file
// Qwen3.5` with the official `openai` npm client. The fake model answers with the text of the
// prompt's last "<<answer:TEXT>>" (so the script sits in the messages): first a tool call in
// Qwen's XML format, then, after the tool result, plain text. Streaming and not. Also: chunk
// order while streaming (content, then id + name, then arguments; parallel indices; reasoning
// apart), reasoning_format deepseek / none, tool_choice required / named (the call forced).
// Usage: node openai_tools.mjs BASE_URL MODULE_DIR. Prints ok/FAIL lines and "N passed, N failed".
import { createRequire } from 'node:module';
import path from 'node:path';

const [baseURL, moduleDir] = process.argv.slice(2);
const require = createRequire(path.join(moduleDir, 'node_modules', 'x.js'));
const OpenAI = require('openai').default ?? require('openai');
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 20000 });

let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); console.log(`ok   ${name}`); passed++; } catch (e) { console.log(`FAIL ${name}: ${e && e.message ? e.message : e}`); failed++; }
}
function eq(a, b, what) {
  if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${what}: got ${JSON.stringify(a)}, want ${JSON.stringify(b)}`);
}

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Current weather',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } } }];
const call = '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>';
const user = { role: 'user', content: `Weather in Paris? <<answer:${call}>>` };

for (const stream of [false, true]) {
  const tag = stream ? 'streaming' : 'non-streaming';
  let assistant;
  await check(`${tag}: the model's call comes back as tool_calls`, async () => {
    let msg, finish;
    if (!stream) {
      const r = await client.chat.completions.create({ model: 'fake', messages: [user], tools, max_tokens: 400 });
      msg = r.choices[0].message;
      finish = r.choices[0].finish_reason;
    } else {
      const s = await client.chat.completions.create({ model: 'fake', messages: [user], tools, max_tokens: 400, stream: true });
      msg = { content: '', tool_calls: [] };
      for await (const c of s) {
        const ch = c.choices[0];
        if (!ch) continue;
        if (ch.delta.content) msg.content += ch.delta.content;
        for (const t of ch.delta.tool_calls ?? []) {
          if (!msg.tool_calls[t.index]) msg.tool_calls[t.index] = { id: t.id, type: t.type, function: { name: t.function.name, arguments: '' } };
          else if (t.id || t.function?.name) throw new Error('id/name sent twice');
          msg.tool_calls[t.index].function.arguments += t.function?.arguments ?? '';
        }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
      if (msg.content.includes('<')) throw new Error(`a tag leaked into content: ${msg.content}`);
    }
    eq(finish, 'tool_calls', 'finish_reason');
    eq(msg.tool_calls.length, 1, 'number of calls');
    eq(msg.tool_calls[0].function.name, 'get_weather', 'name');
    eq(JSON.parse(msg.tool_calls[0].function.arguments), { city: 'Paris', days: 2 }, 'arguments (days typed by the schema)');
    assistant = { role: 'assistant', content: null, tool_calls: msg.tool_calls };
  });
  await check(`${tag}: the tool result goes back and the answer is text`, async () => {
    const messages = [user, assistant, { role: 'tool', tool_call_id: assistant.tool_calls[0].id,
      content: '{"temp_c": 21} <<answer:Looked it up.\n</think>\n\nIt is 21 °C in Paris.>>' }];
    const r = await client.chat.completions.create({ model: 'fake', messages, tools, max_tokens: 400 });
    eq(r.choices[0].message.content, 'It is 21 °C in Paris.', 'content');
    eq(r.choices[0].message.reasoning_content, 'Looked it up.', 'reasoning_content (the prompt opened <think>)');
    eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
    eq(r.choices[0].message.tool_calls ?? null, null, 'no tool calls');
  });
}

// Streaming as it is generated: the text before a call arrives as content chunks before the
// call's first chunk (id + name), then its arguments; parallel calls keep their index; the
// thinking the prompt opened streams as reasoning_content.
const two = 'Checking both.\n\n' + call + '\n' + call.replace('Paris', 'Oslo');
await check('streaming: content first, then each call (id + name, then arguments), reasoning apart', async () => {
  const messages = [{ role: 'user', content: `Paris and Oslo? <<answer:Let me look.\n</think>\n\n${two}>>` }];
  const s = await client.chat.completions.create({ model: 'fake', messages, tools, max_tokens: 800, stream: true });
  const events = [];
  let content = '', reasoning = '', finish;
  const calls = [];
  for await (const c of s) {
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.delta.reasoning_content) { reasoning += ch.delta.reasoning_content; events.push('r'); }
    if (ch.delta.content) { content += ch.delta.content; events.push('c'); }
    for (const t of ch.delta.tool_calls ?? []) {
      if (t.id) {
        if (calls[t.index]) throw new Error('id sent twice');
        eq(t.type, 'function', 'type');
        calls[t.index] = { id: t.id, name: t.function.name, arguments: '' };
        events.push(`id${t.index}`);
      } else {
        calls[t.index].arguments += t.function.arguments;
        events.push(`a${t.index}`);
      }
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  eq(reasoning, 'Let me look.', 'reasoning_content');
  eq(content, 'Checking both.', 'content');
  eq(finish, 'tool_calls', 'finish_reason');
  eq(calls.map(c => [c.id, c.name, JSON.parse(c.arguments)]),
     [['call_1', 'get_weather', { city: 'Paris', days: 2 }], ['call_2', 'get_weather', { city: 'Oslo', days: 2 }]], 'calls');
  // the fake model says one byte per token: content and reasoning come in many chunks, in order
  const order = events.filter((e, i) => e !== events[i - 1]);
  eq(order, ['r', 'c', 'id0', 'a0', 'id1', 'a1'], 'chunk order');
  if (events.filter(e => e === 'c').length < 5) throw new Error(`content not streamed: ${events.join(',')}`);
});

// The client's own streaming helper (beta.chat.completions.stream) accumulates the deltas: its
// final message equals the non-streamed one, for XML calls (arguments streamed piece by piece
// while generated: many argument deltas per call) and a JSON call (its arguments in one piece).
const mixed = 'Plan.\n</think>\n\nChecking.\n\n' + call.replace('Paris', 'Paris "centre"\nand \\ more') + '\n' + call.replace('Paris', 'Oslo') +
  '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 3}}\n</tool_call>\n';
await check('streaming helper: the accumulated message equals the non-streamed one; XML arguments in pieces', async () => {
  const req = { model: 'fake', messages: [{ role: 'user', content: `Three cities? <<answer:${mixed}>>` }], tools, max_tokens: 2000 };
  const whole = (await client.chat.completions.create(req)).choices[0];
  const s = client.beta.chat.completions.stream({ ...req, stream: true });
  const pieces = [0, 0, 0];
  s.on('tool_calls.function.arguments.delta', (e) => { pieces[e.index]++; });
  const fin = (await s.finalChatCompletion()).choices[0];
  eq(fin.finish_reason, whole.finish_reason, 'finish_reason');
  eq(fin.message.content, whole.message.content, `content (whole: ${JSON.stringify(whole.message)})`);
  eq(whole.message.content, 'Checking.', 'content');
  eq(fin.message.tool_calls.map(c => [c.id, c.type, c.function.name, c.function.arguments]),
     whole.message.tool_calls.map(c => [c.id, c.type, c.function.name, c.function.arguments]), 'tool_calls (arguments byte for byte)');
  eq(JSON.parse(whole.message.tool_calls[0].function.arguments), { city: 'Paris "centre"\nand \\ more', days: 2 }, 'first call');
  eq(whole.message.tool_calls.length, 3, 'three calls');
  if (pieces[0] < 10 || pieces[1] < 3) throw new Error(`XML arguments not streamed in pieces: ${pieces}`);
});

// --reasoning-format deepseek (the default) vs a request's reasoning_format auto / deepseek-legacy / none; no tools
const thought = 'Hmm.\n</think>\n\nHello <b>there</b>.';
for (const stream of [false, true]) {
  await check(`${stream ? 'streaming' : 'non-streaming'}: reasoning_format deepseek and none without tools`, async () => {
    for (const rf of ['deepseek', 'auto', 'deepseek-legacy', 'none']) {
      const req = { model: 'fake', messages: [{ role: 'user', content: `Hi <<answer:${thought}>>` }], max_tokens: 400, reasoning_format: rf };
      let content = '', reasoning = '';
      if (!stream) {
        const m = (await client.chat.completions.create(req)).choices[0].message;
        content = m.content; reasoning = m.reasoning_content ?? '';
      } else {
        for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
          const d = c.choices[0]?.delta ?? {};
          content += d.content ?? ''; reasoning += d.reasoning_content ?? '';
        }
      }
      if (rf === 'deepseek-legacy' && stream) {   // llama.cpp: reasoning_in_content = stream && legacy
        eq(reasoning, '', 'reasoning_content'); eq(content, '<think>Hmm.</think>Hello <b>there</b>.', 'content');
      } else if (rf !== 'none') { eq(reasoning, 'Hmm.', 'reasoning_content'); eq(content, 'Hello <b>there</b>.', 'content'); }
      else { eq(reasoning, '', 'reasoning_content'); eq(content, thought, 'content as generated'); }
    }
  });
}

// tool_choice required / a named function: the answer is begun with the template's call text up
// to the name's start / end, so the (scripted) model only writes the rest
for (const [choice, rest] of [[{ type: 'function', function: { name: 'get_weather' } }, '>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>'],
                              ['required', 'get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>']]) {
  for (const stream of [false, true]) {
    await check(`${stream ? 'streaming' : 'non-streaming'}: tool_choice ${JSON.stringify(choice)} forces the call`, async () => {
      const req = { model: 'fake', messages: [{ role: 'user', content: `Rome? <<answer:${rest}>>` }], tools, tool_choice: choice, max_tokens: 400 };
      let calls, finish;
      if (!stream) {
        const ch = (await client.chat.completions.create(req)).choices[0];
        calls = ch.message.tool_calls; finish = ch.finish_reason;
      } else {
        calls = [];
        for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
          const ch = c.choices[0];
          if (!ch) continue;
          if (ch.delta.content) throw new Error(`content: ${ch.delta.content}`);
          for (const t of ch.delta.tool_calls ?? []) {
            if (t.id) calls[t.index] = { id: t.id, function: { name: t.function.name, arguments: '' } };
            else calls[t.index].function.arguments += t.function.arguments;
          }
          if (ch.finish_reason) finish = ch.finish_reason;
        }
      }
      eq(finish, 'tool_calls', 'finish_reason');
      eq(calls.map(c => [c.function.name, JSON.parse(c.function.arguments)]), [['get_weather', { city: 'Rome' }]], 'calls');
    });
  }
}
await check('tool_choice naming a function not in tools is a 400', async () => {
  try {
    await client.chat.completions.create({ model: 'fake', messages: [user], tools, tool_choice: { type: 'function', function: { name: 'nope' } } });
    throw new Error('no error');
  } catch (e) { eq(e.status, 400, 'status'); }
});

await check('a template raise_exception is a 400 with its message', async () => {
  try {
    await client.chat.completions.create({ model: 'fake', messages: [{ role: 'user', content: 'a' }, { role: 'system', content: 'b' }] });
    throw new Error('no error');
  } catch (e) {
    eq(e.status, 400, 'status');
    if (!String(e.message).includes('System message must be at the beginning.')) throw new Error(e.message);
  }
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
