// Drives warm-httpd with the official `openai` npm package (pinned by test_httpd.py) and
// prints one JSON document of what it saw. argv[2]: {"base", "model", "chat_model",
// "prompt", "user", "n", "stop"}.
import OpenAI from "openai";

const cfg = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: cfg.base, apiKey: "any-key", maxRetries: 0 });
const out = {};

out.models = (await client.models.list()).data.map((m) => m.id);

const chatReq = { model: cfg.chat_model, messages: [{ role: "user", content: cfg.user }],
                  max_tokens: cfg.n, temperature: 0 };
const chat = await client.chat.completions.create(chatReq);
out.chat = { text: chat.choices[0].message.content, finish: chat.choices[0].finish_reason,
             usage: chat.usage, object: chat.object };

let text = "", usage = null, chunks = 0, roles = [];
const stream = await client.chat.completions.create({ ...chatReq, stream: true,
                                                      stream_options: { include_usage: true } });
for await (const c of stream) {
  chunks++;
  if (c.usage) usage = c.usage;
  for (const ch of c.choices) {
    if (ch.delta.role) roles.push(ch.delta.role);
    if (ch.delta.content) text += ch.delta.content;
  }
}
out.chat_stream = { text, usage, chunks, roles };

const compReq = { model: cfg.model, prompt: cfg.prompt, max_tokens: cfg.n, temperature: 0 };
const comp = await client.completions.create(compReq);
out.completion = { text: comp.choices[0].text, usage: comp.usage,
                   finish: comp.choices[0].finish_reason };
text = ""; usage = null;
const cs = await client.completions.create({ ...compReq, stream: true,
                                             stream_options: { include_usage: true } });
for await (const c of cs) {
  if (c.usage) usage = c.usage;
  for (const ch of c.choices) text += ch.text;
}
out.completion_stream = { text, usage };

const stopped = await client.completions.create({ ...compReq, stop: [cfg.stop] });
out.stop = { text: stopped.choices[0].text, finish: stopped.choices[0].finish_reason };

try {
  await client.chat.completions.create({ ...chatReq, n: 2 });
  out.refused = null;
} catch (e) {
  out.refused = { status: e.status, message: e.message, param: e.param ?? e.error?.param };
}
console.log(JSON.stringify(out));
