// Embeddings through the official `ollama` npm package (pinned by test_httpd.py): embed()
// with one text and with a list, embeddings() (the legacy endpoint), show()'s capabilities,
// and the Open WebUI flow: embed documents and a query, pick the closest document by
// cosine, then chat with it in the prompt; ps() with both models resident.
// argv[2]: {"host", "model", "chat_model", "docs", "query"}. Prints one JSON document.
import { Ollama } from "ollama";

const cfg = JSON.parse(process.argv[2]);
const ollama = new Ollama({ host: cfg.host });
const out = {};
out.one = await ollama.embed({ model: cfg.model, input: cfg.docs[0] });
out.many = await ollama.embed({ model: cfg.model, input: cfg.docs, truncate: true });
out.dims = await ollama.embed({ model: cfg.model, input: cfg.docs[0], dimensions: 16 });
out.legacy = await ollama.embeddings({ model: cfg.model, prompt: cfg.docs[0] });
out.show = (await ollama.show({ model: cfg.model })).capabilities;
out.chat_show = (await ollama.show({ model: cfg.chat_model })).capabilities;

const cos = (a, b) => {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) { ab += a[i] * b[i]; aa += a[i] * a[i]; bb += b[i] * b[i]; }
  return ab / Math.sqrt(aa * bb);
};
const q = (await ollama.embed({ model: cfg.model, input: cfg.query })).embeddings[0];
const scores = out.many.embeddings.map((e) => cos(e, q));
out.best = scores.indexOf(Math.max(...scores));
const r = await ollama.chat({
  model: cfg.chat_model, stream: false, options: { temperature: 0, num_predict: 4 },
  messages: [{ role: "system", content: `Answer from this document: ${cfg.docs[out.best]}` },
             { role: "user", content: cfg.query }] });
out.chat = { done: r.done, prompt_eval_count: r.prompt_eval_count };
out.ps = (await ollama.ps()).models.map((m) => m.name).sort();
try {
  await ollama.chat({ model: cfg.model, messages: [{ role: "user", content: "x" }], stream: false });
  out.chat_refused = null;
} catch (e) {
  out.chat_refused = { status: e.status_code, message: e.error ?? e.message };
}
console.log(JSON.stringify(out));
