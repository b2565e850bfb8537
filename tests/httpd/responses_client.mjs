// OpenAI's Responses API through the official `openai` npm package (the version
// test_httpd.py pins), as Codex-style agents use it against warm-httpd: responses.create
// whole (the SDK's output_text) and streamed (raw events, and responses.stream() folding
// them into its final response), a forced function call (tool_choice {type: "function",
// name}) whole and streamed, the call and its output sent back as input items and
// answered, text.format json_schema, and previous_response_id refused.
// argv[2]: {"base", "model", "prompt", "max", "tools"}. Prints one JSON document.
import OpenAI from "openai";

const cfg = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: cfg.base, apiKey: "any-key", maxRetries: 0 });
const plain = { model: cfg.model, input: cfg.prompt, max_output_tokens: cfg.max,
                temperature: 0, store: false, metadata: { app: "test" }, user: "u1" };
const out = {};

const whole = await client.responses.create(plain);
out.plain = { response: whole, output_text: whole.output_text };
const events = [];
for await (const e of await client.responses.create({ ...plain, stream: true })) events.push(e);
out.stream = events;

const input = [{ role: "user", content: [{ type: "input_text", text: "What time is it in Paris?" }] }];
const forced = { model: cfg.model, input, instructions: "You tell the time.", temperature: 0,
                 max_output_tokens: 200, tools: cfg.tools, parallel_tool_calls: false,
                 tool_choice: { type: "function", name: "get_time" } };
out.tool = await client.responses.create(forced);
const tstream = client.responses.stream(forced);
const tevents = [];
tstream.on("event", (e) => tevents.push(e.type));
out.tool_stream = { response: await tstream.finalResponse(), events: tevents };

// The call and its output go back as items, after the output as the SDK returned it.
const call = out.tool.output.find((i) => i.type === "function_call");
out.follow = await client.responses.create({
  model: cfg.model, temperature: 0, max_output_tokens: 8, tools: cfg.tools,
  instructions: "You tell the time.",
  input: [...input, ...out.tool.output,
          { type: "function_call_output", call_id: call.call_id, output: "12:00" }] });

out.schema = await client.responses.create({
  model: cfg.model, input: "A city and its population, as JSON.", temperature: 0,
  max_output_tokens: 200, reasoning: { effort: "minimal" },
  text: { format: { type: "json_schema", name: "city", strict: true, schema: cfg.schema } } });
out.schema_text = out.schema.output_text;

try {
  await client.responses.create({ ...plain, previous_response_id: whole.id });
  out.previous = null;
} catch (e) {
  out.previous = { status: e.status, body: e.error };
}
console.log(JSON.stringify(out));
