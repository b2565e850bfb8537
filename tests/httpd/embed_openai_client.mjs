// Embeddings through the official `openai` npm package (pinned by test_httpd.py):
// embeddings.create with one text, a list, token ids, encoding_format float and base64
// (the SDK's default asks for base64 and decodes it), dimensions, and usage.
// argv[2]: {"base", "model", "docs", "tokens"}. Prints one JSON document.
import OpenAI from "openai";

const cfg = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: cfg.base, apiKey: "unused" });
const out = {};
const pick = (r) => ({ vecs: r.data.map((d) => d.embedding), index: r.data.map((d) => d.index),
                       usage: r.usage, model: r.model, object: r.object });
out.float = pick(await client.embeddings.create({ model: cfg.model, input: cfg.docs,
                                                 encoding_format: "float" }));
out.default = pick(await client.embeddings.create({ model: cfg.model, input: cfg.docs }));
const b64 = await client.embeddings.create({ model: cfg.model, input: cfg.docs[0],
                                            encoding_format: "base64" });
out.base64 = b64.data[0].embedding; // the SDK returns the string as sent when asked for base64
out.tokens = pick(await client.embeddings.create({ model: cfg.model, input: cfg.tokens,
                                                  encoding_format: "float" }));
out.dims = pick(await client.embeddings.create({ model: cfg.model, input: cfg.docs[0],
                                                dimensions: 8, encoding_format: "float" }));
console.log(JSON.stringify(out));
