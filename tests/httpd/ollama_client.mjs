// Drives warm-httpd with the official `ollama` npm package (pinned by test_httpd.py) and
// prints one JSON document of what it saw. argv[2]: {"host", "model", "chat_model",
// "prompt", "user", "n"}.
import { Ollama } from "ollama";

const cfg = JSON.parse(process.argv[2]);
const ollama = new Ollama({ host: cfg.host });
const out = {};
const options = { temperature: 0, num_predict: cfg.n };

out.version = (await ollama.version()).version;
out.tags = (await ollama.list()).models.map((m) => m.name);
const gen = await ollama.generate({ model: cfg.model, prompt: cfg.prompt, options, stream: false });
out.generate = { text: gen.response, done: gen.done, reason: gen.done_reason,
                 prompt_eval_count: gen.prompt_eval_count, eval_count: gen.eval_count };
let text = "", last = null;
for await (const part of await ollama.generate({ model: cfg.model, prompt: cfg.prompt, options,
                                                 stream: true })) {
  text += part.response;
  last = part;
}
out.generate_stream = { text, done: last.done, eval_count: last.eval_count };
const msgs = [{ role: "user", content: cfg.user }];
const chat = await ollama.chat({ model: cfg.chat_model + ":latest", messages: msgs, options,
                                 stream: false });
out.chat = { text: chat.message.content, role: chat.message.role, eval_count: chat.eval_count };
text = "";
for await (const part of await ollama.chat({ model: cfg.chat_model, messages: msgs, options,
                                             stream: true }))
  text += part.message.content;
out.chat_stream = { text };
out.ps = (await ollama.ps()).models.map((m) => m.name);
out.show = (await ollama.show({ model: cfg.model })).details.format;
// keep_alive 0: unload once nobody uses the model.
await ollama.generate({ model: cfg.chat_model, prompt: "x", options: { num_predict: 1 },
                        keep_alive: 0, stream: false });
for (const call of [() => ollama.pull({ model: "llama3" }), () => ollama.delete({ model: cfg.model })]) {
  try {
    await call();
    (out.not_here ??= []).push(null);
  } catch (e) {
    (out.not_here ??= []).push({ status: e.status_code, message: e.error ?? e.message });
  }
}
console.log(JSON.stringify(out));
