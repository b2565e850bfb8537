// Tools and thinking through the official `ollama` npm package (pinned by test_httpd.py):
// /api/chat with tools (tool_choice, warm-httpd's extension, forces the call a model with
// random weights would not make), message.tool_calls whole and streamed, the tool's result
// (role "tool", tool_name) answered; think true and false with message.thinking, whole and
// streamed; /api/show's capabilities. argv[2]: {"host", "model", "think_model", "tools"}.
// Prints one JSON document.
import { Ollama } from "ollama";

const cfg = JSON.parse(process.argv[2]);
const ollama = new Ollama({ host: cfg.host });
const msgs = [{ role: "user", content: "What time is it in Paris?" }];
const options = { temperature: 0, num_predict: 200 };
const out = {};

const req = { model: cfg.model, messages: msgs, tools: cfg.tools, options,
              tool_choice: { type: "function", function: { name: "get_time" } } };
const r = await ollama.chat({ ...req, stream: false });
out.whole = { message: r.message, done_reason: r.done_reason };
out.stream = { content: "", tool_calls: [], done_reason: null };
for await (const p of await ollama.chat({ ...req, stream: true })) {
  out.stream.content += p.message?.content ?? "";
  out.stream.tool_calls.push(...(p.message?.tool_calls ?? []));
  if (p.done) out.stream.done_reason = p.done_reason;
}
const follow = await ollama.chat({
  model: cfg.model, tools: cfg.tools, options: { temperature: 0, num_predict: 8 }, stream: false,
  messages: [...msgs, r.message, { role: "tool", tool_name: "get_time", content: "12:00" }] });
out.follow = { message: follow.message, prompt_eval_count: follow.prompt_eval_count };
const think = { model: cfg.think_model, messages: msgs, options: { temperature: 0, num_predict: 8 } };
out.think_on = (await ollama.chat({ ...think, think: true, stream: false })).message;
out.think_off = (await ollama.chat({ ...think, think: false, stream: false })).message;
out.think_stream = { thinking: "", content: "" };
for await (const p of await ollama.chat({ ...think, think: "high", stream: true })) {
  out.think_stream.thinking += p.message?.thinking ?? "";
  out.think_stream.content += p.message?.content ?? "";
}
try {
  await ollama.chat({ model: cfg.model, messages: msgs, think: true, stream: false });
  out.think_refused = null;
} catch (e) {
  out.think_refused = { status: e.status_code, message: e.error ?? e.message };
}
out.show = {};
for (const m of [cfg.model, cfg.think_model]) out.show[m] = (await ollama.show({ model: m })).capabilities;
console.log(JSON.stringify(out));
