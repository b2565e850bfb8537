// Tools and reasoning through the official `openai` npm package (pinned by test_httpd.py):
// tool_choice required (parallel_tool_calls false) whole and streamed (the SDK's stream
// helper accumulates the tool_calls deltas, the name then the arguments' fragments, into
// message.tool_calls), a named function, the
// tool's result sent back (role "tool") and answered; reasoning_content whole and streamed
// from a thinking model, reasoning_effort "none"; tools refused for a model without a tool
// format. argv[2]: {"base", "model", "think_model", "no_tools_model", "tools"}. Prints one
// JSON document.
import OpenAI from "openai";

const cfg = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: cfg.base, apiKey: "any-key", maxRetries: 0 });
const msgs = [{ role: "user", content: "What time is it in Paris?" }];
const req = { model: cfg.model, messages: msgs, tools: cfg.tools, tool_choice: "required",
              parallel_tool_calls: false, temperature: 0, max_tokens: 200 };
const out = {};

const r = await client.chat.completions.create(req);
out.whole = { message: r.choices[0].message, finish: r.choices[0].finish_reason };
const stream = client.chat.completions.stream({ ...req, stream: true });
const deltas = [];
stream.on("chunk", (c) => {
  if (c.choices.length && c.choices[0].delta.tool_calls) deltas.push(c.choices[0].delta.tool_calls);
});
const final = await stream.finalChatCompletion();
out.stream = { message: final.choices[0].message, finish: final.choices[0].finish_reason, deltas };
const named = await client.chat.completions.create({
  ...req, tool_choice: { type: "function", function: { name: "get_time" } } });
out.named = { message: named.choices[0].message, finish: named.choices[0].finish_reason };
// The tool's result goes back with the assistant's message as the SDK returned it.
const call = r.choices[0].message.tool_calls[0];
const follow = await client.chat.completions.create({
  model: cfg.model, temperature: 0, max_tokens: 8, tools: cfg.tools,
  messages: [...msgs, r.choices[0].message,
             { role: "tool", tool_call_id: call.id, content: "12:00" }] });
out.follow = { message: follow.choices[0].message, finish: follow.choices[0].finish_reason,
               usage: follow.usage };
// Reasoning: the thinking model's reply, whole and streamed, and with thinking off.
const think = { model: cfg.think_model, messages: msgs, max_tokens: 8, temperature: 0 };
out.think = (await client.chat.completions.create(think)).choices[0].message;
out.think_stream = { reasoning: "", content: "" };
for await (const c of await client.chat.completions.create({ ...think, stream: true })) {
  if (!c.choices.length) continue;
  out.think_stream.reasoning += c.choices[0].delta.reasoning_content ?? "";
  out.think_stream.content += c.choices[0].delta.content ?? "";
}
out.think_off = (await client.chat.completions.create({ ...think, reasoning_effort: "none" }))
  .choices[0].message;
try {
  await client.chat.completions.create({ model: cfg.no_tools_model, messages: msgs,
                                         tools: cfg.tools, max_tokens: 4 });
  out.refused = null;
} catch (e) {
  out.refused = { status: e.status, message: e.error?.message ?? e.message };
}
console.log(JSON.stringify(out));
