// Constrained output through the official `ollama` npm package (pinned by test_httpd.py):
// format as a JSON Schema on /api/generate and /api/chat, whole and streamed, format
// "json", and an unsupported keyword refused. Every reply is parsed here with JSON.parse;
// the test validates the values against the schema.
// argv[2]: {"host", "model", "chat_model", "prompt", "schema", "bad_schema", "seeds"}.
// Prints one JSON document.
import { Ollama } from "ollama";

const cfg = JSON.parse(process.argv[2]);
const ollama = new Ollama({ host: cfg.host });
const msgs = [{ role: "user", content: "Tell me about a person." }];
const out = { generate: [], generate_stream: [], chat: [], chat_stream: [] };

async function streamed(parts, field) {
  let text = "", reason = null;
  for await (const p of parts) {
    text += field === "message" ? p.message.content : p.response;
    if (p.done) reason = p.done_reason;
  }
  return { value: JSON.parse(text), text, reason };
}

for (const seed of cfg.seeds) {
  const options = seed === 0 ? { temperature: 0, num_predict: 300 }
                             : { temperature: 1, seed, num_predict: 300 };
  const g = await ollama.generate({ model: cfg.model, prompt: cfg.prompt, format: cfg.schema,
                                    stream: false, options });
  out.generate.push({ seed, value: JSON.parse(g.response), text: g.response,
                      reason: g.done_reason });
  out.generate_stream.push({ seed, ...await streamed(await ollama.generate({
    model: cfg.model, prompt: cfg.prompt, format: cfg.schema, stream: true, options }),
    "response") });
  const c = await ollama.chat({ model: cfg.chat_model, messages: msgs, format: cfg.schema,
                                stream: false, options });
  out.chat.push({ seed, value: JSON.parse(c.message.content), text: c.message.content,
                  reason: c.done_reason });
  out.chat_stream.push({ seed, ...await streamed(await ollama.chat({
    model: cfg.chat_model, messages: msgs, format: cfg.schema, stream: true, options }),
    "message") });
}
const j = await ollama.generate({ model: cfg.model, prompt: cfg.prompt, format: "json",
                                  stream: false, options: { temperature: 0, num_predict: 300 } });
out.json = { value: JSON.parse(j.response), reason: j.done_reason };
try {
  await ollama.chat({ model: cfg.chat_model, messages: msgs, format: cfg.bad_schema,
                      stream: false });
  out.refused = null;
} catch (e) {
  out.refused = { status: e.status_code, message: e.error ?? e.message };
}
console.log(JSON.stringify(out));
