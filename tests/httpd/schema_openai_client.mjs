// Constrained output through the official `openai` npm package (pinned by test_httpd.py):
// response_format json_schema (strict) and json_object on /v1/chat/completions, whole and
// streamed, json_schema on /v1/completions, and an unsupported keyword refused. Every
// content is parsed here with JSON.parse; the test validates the values against the schema.
// argv[2]: {"base", "model", "chat_model", "prompt", "schema", "bad_schema", "seeds"}.
// Prints one JSON document.
import OpenAI from "openai";

const cfg = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: cfg.base, apiKey: "any-key", maxRetries: 0 });
const msgs = [{ role: "user", content: "Tell me about a person." }];
const schemaFormat = (schema) => ({ type: "json_schema",
                                    json_schema: { name: "person", strict: true, schema } });
const out = { chat: [], chat_stream: [] };

async function streamed(create) {
  let text = "", finish = null;
  for await (const c of await create()) {
    if (c.choices.length) {
      text += c.choices[0].delta?.content ?? c.choices[0].text ?? "";
      finish = c.choices[0].finish_reason ?? finish;
    }
  }
  return { value: JSON.parse(text), text, finish };
}

for (const seed of cfg.seeds) {
  const sampling = seed === 0 ? { temperature: 0 } : { temperature: 1, seed };
  const r = await client.chat.completions.create({
    model: cfg.chat_model, messages: msgs, max_tokens: 300,
    response_format: schemaFormat(cfg.schema), ...sampling });
  const text = r.choices[0].message.content;
  out.chat.push({ seed, value: JSON.parse(text), text, finish: r.choices[0].finish_reason });
  out.chat_stream.push({ seed, ...await streamed(() => client.chat.completions.create({
    model: cfg.chat_model, messages: msgs, max_tokens: 300, stream: true,
    response_format: schemaFormat(cfg.schema), ...sampling })) });
}
// The SDK's own parse(): it JSON-parses a json_schema reply into message.parsed.
const parsed = await client.chat.completions.parse({
  model: cfg.chat_model, messages: msgs, max_tokens: 300, temperature: 0,
  response_format: schemaFormat(cfg.schema) });
out.parsed = parsed.choices[0].message.parsed;
const obj = await client.chat.completions.create({
  model: cfg.chat_model, messages: msgs, max_tokens: 300, temperature: 0,
  response_format: { type: "json_object" } });
out.json_object = { value: JSON.parse(obj.choices[0].message.content),
                    finish: obj.choices[0].finish_reason };
out.completion = await streamed(() => client.completions.create({
  model: cfg.model, prompt: cfg.prompt, max_tokens: 300, temperature: 0, stream: true,
  response_format: schemaFormat(cfg.schema) }));
try {
  await client.chat.completions.create({ model: cfg.chat_model, messages: msgs, max_tokens: 5,
                                         response_format: schemaFormat(cfg.bad_schema) });
  out.refused = null;
} catch (e) {
  out.refused = { status: e.status, message: e.error?.message ?? e.message, param: e.param,
                  type: e.type };
}
console.log(JSON.stringify(out));
