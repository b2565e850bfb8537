// The Vercel AI SDK (`ai`, pinned by test_httpd_aisdk.py) through its two providers for
// local servers: `ollama-ai-provider-v2` (/api/chat) and `@ai-sdk/openai-compatible`
// (/v1/chat/completions). Per provider: a tool round trip (a forced call of get_time, the
// SDK runs the tool, its result goes back, the model answers) with generateText and with
// streamText (every stream part's type recorded); a JSON-schema answer with generateObject,
// which the SDK validates with its zod schema; and a refused request (tools for a model
// without a tool format) as the SDK reports it. argv[2]: {"host", "base", "model",
// "no_tools_model", "tools"}. Prints one JSON document.
import { generateObject, generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { createOllama } from "ollama-ai-provider-v2";
import { z } from "zod";

const cfg = JSON.parse(process.argv[2]);
const providers = {
  ollama: createOllama({ baseURL: cfg.host + "/api" }),
  compat: createOpenAICompatible({ name: "warmd", baseURL: cfg.base + "/v1", apiKey: "any-key",
                                   supportsStructuredOutputs: true, includeUsage: true }),
};
const ran = [];
const tools = Object.fromEntries(cfg.tools.map((t) => [t.function.name, tool({
  description: t.function.description,
  inputSchema: jsonSchema(t.function.parameters),
  execute: async (input) => { ran.push({ name: t.function.name, input }); return "12:00"; },
})]));
const prompt = "What time is it in Paris?";
// the first step must call get_time; the step after the tool's result answers in text
const loop = {
  tools, prompt, temperature: 0, maxOutputTokens: 200, maxRetries: 0,
  toolChoice: { type: "tool", toolName: "get_time" }, stopWhen: stepCountIs(2),
  prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: "none",
                                                       maxOutputTokens: 8 } : undefined),
};
const steps = (ss) => ss.map((s) => ({
  calls: s.toolCalls.map((c) => ({ name: c.toolName, id: c.toolCallId, input: c.input })),
  results: s.toolResults.map((r) => ({ name: r.toolName, id: r.toolCallId, output: r.output })),
  finish: s.finishReason, text: s.text, input_tokens: s.usage.inputTokens,
}));
const person = z.object({ name: z.string().min(1).max(12), age: z.number().int().min(0).max(120),
                          pet: z.enum(["cat", "dog"]) });

const out = {};
for (const [key, provider] of Object.entries(providers)) {
  const model = provider(cfg.model);
  const r = {};
  ran.length = 0;
  const whole = await generateText({ model, ...loop });
  r.whole = { steps: steps(whole.steps), ran: [...ran] };
  ran.length = 0;
  const st = streamText({ model, ...loop });
  const parts = [];
  let deltas = "";
  for await (const p of st.fullStream) {
    parts.push(p.type);
    if (p.type === "tool-input-delta") deltas += p.delta;
    if (p.type === "error") throw p.error;
  }
  r.stream = { steps: steps(await st.steps), ran: [...ran], parts, deltas };
  const obj = await generateObject({ model, schema: person, temperature: 0, maxRetries: 0,
                                     maxOutputTokens: 200, prompt: "Describe a person." });
  r.object = obj.object;
  try {
    await generateText({ model: provider(cfg.no_tools_model), prompt, tools, maxRetries: 0,
                         maxOutputTokens: 4 });
    r.refused = null;
  } catch (e) {
    r.refused = { name: e.name, status: e.statusCode, message: e.message };
  }
  out[key] = r;
}
console.log(JSON.stringify(out));
