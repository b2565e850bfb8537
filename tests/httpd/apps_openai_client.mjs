// OpenAI request fields apps send, through the official `openai` npm package (pinned by
// test_httpd.py): stream_options.include_usage (one last chunk with usage and no
// choices), seed, stop, max_completion_tokens, and the embeddings error.
// argv[2]: {"base", "model", "chat_model", "prompt"}. Prints one JSON document.
import OpenAI from "openai";

const cfg = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: cfg.base, apiKey: "any-key", maxRetries: 0 });
const out = {};

async function streamed(create) {
  let usage = null, n = 0, last = null;
  for await (const c of await create()) {
    if (c.usage) usage = c.usage, n++;
    last = c.choices;
  }
  return { usage, n_usage_chunks: n, last_choices: last };
}
const msgs = [{ role: "user", content: "Hi" }];
out.chat = await streamed(() => client.chat.completions.create({
  model: cfg.chat_model, messages: msgs, max_tokens: 5, temperature: 0, stream: true,
  stream_options: { include_usage: true } }));
out.completion = await streamed(() => client.completions.create({
  model: cfg.model, prompt: cfg.prompt, max_tokens: 5, temperature: 0, stream: true,
  stream_options: { include_usage: true } }));

const seeded = () => client.completions.create({ model: cfg.model, prompt: cfg.prompt,
                                                 max_tokens: 12, temperature: 1, seed: 42 });
out.seed = [(await seeded()).choices[0].text, (await seeded()).choices[0].text];

const chat = await client.chat.completions.create({ model: cfg.chat_model, messages: msgs,
                                                    max_completion_tokens: 3, temperature: 0 });
out.max_completion_tokens = chat.usage.completion_tokens;

const full = (await client.completions.create({ model: cfg.model, prompt: cfg.prompt,
                                                max_tokens: 12, temperature: 0 })).choices[0].text;
const word = full.trim().split(/\s+/)[3];
const stopped = await client.completions.create({ model: cfg.model, prompt: cfg.prompt,
                                                  max_tokens: 12, temperature: 0,
                                                  stop: ["zzzq", word] });
out.stop = { word, text: stopped.choices[0].text, finish: stopped.choices[0].finish_reason };

try {
  await client.embeddings.create({ model: cfg.model, input: "x" });
  out.embed_refused = null;
} catch (e) {
  out.embed_refused = { status: e.status, message: e.error?.message ?? e.message };
}
console.log(JSON.stringify(out));
