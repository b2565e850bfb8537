// Anthropic's Messages API through the official `@anthropic-ai/sdk` npm package (pinned by
// test_httpd_anthropic.py), as Claude Code uses it against warm-httpd: a plain message whole
// and streamed (the SDK's messages.stream() accumulating the events into its final message),
// a forced tool call (tool_choice {type: "tool"}) whole and streamed, the tool's result sent
// back and answered, count_tokens for a short and a longer conversation, an unknown model's
// error, and a Claude-Code-shaped request (system as text blocks with cache_control, tools,
// metadata, anthropic-beta, stream true). argv[2]: {"base", "model", "prompt", "tools"}.
// Prints one JSON document.
import Anthropic from "@anthropic-ai/sdk";

const cfg = JSON.parse(process.argv[2]);
const client = new Anthropic({ baseURL: cfg.base, apiKey: "any-key", maxRetries: 0 });
const msgs = [{ role: "user", content: cfg.prompt }];
const plain = { model: cfg.model, max_tokens: cfg.max_tokens, temperature: 0, messages: msgs };
const out = {};

out.plain = await client.messages.create(plain);
const events = [];
const stream = client.messages.stream(plain);
stream.on("streamEvent", (e) => events.push(e.type));
out.stream = { message: await stream.finalMessage(), events };

const user = [{ role: "user", content: "What time is it in Paris?" }];
const forced = { model: cfg.model, max_tokens: 200, temperature: 0, messages: user,
                 tools: cfg.tools, tool_choice: { type: "tool", name: "get_time" } };
out.tool = await client.messages.create(forced);
const tevents = [];
const tstream = client.messages.stream(forced);
tstream.on("streamEvent", (e) => tevents.push(e.type === "content_block_delta"
                                                ? e.delta.type : e.type));
out.tool_stream = { message: await tstream.finalMessage(), events: tevents };
// The tool's result goes back after the assistant's turn as the SDK returned it.
const use = out.tool.content.find((b) => b.type === "tool_use");
const convo = [...user, { role: "assistant", content: out.tool.content },
               { role: "user", content: [{ type: "tool_result", tool_use_id: use.id,
                                           content: [{ type: "text", text: "12:00" }] }] }];
out.follow = await client.messages.create({ model: cfg.model, max_tokens: 8, temperature: 0,
                                            tools: cfg.tools, messages: convo });
out.count_follow = await client.messages.countTokens({ model: cfg.model, tools: cfg.tools,
                                                       messages: convo });
out.count_short = await client.messages.countTokens({ model: cfg.model, messages: msgs });
out.count_long = await client.messages.countTokens({
  model: cfg.model, system: "You are a terse assistant.",
  messages: [...msgs, { role: "assistant", content: "Hello there." },
             { role: "user", content: "Tell me a story about a dog." }] });

try {
  await client.messages.create({ ...plain, model: "no-such-model" });
  out.unknown = null;
} catch (e) {
  out.unknown = { status: e.status, body: e.error };
}

// What Claude Code sends: system blocks with cache_control, tools with cache_control on
// the last, metadata, the beta header, stream true (read as raw events here).
const cc = await client.messages.create({
  model: cfg.model, max_tokens: 16, stream: true, temperature: 1,
  metadata: { user_id: "user_abc_account__session_123" },
  system: [{ type: "text", text: "You are Claude Code, Anthropic's official CLI for Claude." },
           { type: "text", text: "You are an interactive CLI tool that helps users with "
             + "software engineering tasks.", cache_control: { type: "ephemeral" } }],
  tools: cfg.tools.map((t, i) => i === cfg.tools.length - 1
    ? { ...t, cache_control: { type: "ephemeral" } } : t),
  messages: [{ role: "user", content: [
    { type: "text", text: "<system-reminder>As you answer, use the tools.</system-reminder>" },
    { type: "text", text: "What is the weather in Oslo?",
      cache_control: { type: "ephemeral" } }] }],
}, { headers: { "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14" } });
out.claude_code = [];
for await (const e of cc) out.claude_code.push(e);
console.log(JSON.stringify(out));
