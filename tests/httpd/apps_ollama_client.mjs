// What apps read and send, through the official `ollama` npm package (pinned by
// test_httpd.py): /api/show's capabilities and context length, errors as the package
// reports them (suffix on a model without FIM tokens, embeddings), and Open WebUI's unload.
// argv[2]: {"host", "model", "coder"}. Prints one JSON document of what it saw.
import { Ollama } from "ollama";

const cfg = JSON.parse(process.argv[2]);
const ollama = new Ollama({ host: cfg.host });
const out = {};

const show = await ollama.show({ model: cfg.coder });
out.show = { capabilities: show.capabilities,
             context_length: show.model_info[`${show.details.family}.context_length`] };
async function refused(call) {
  try {
    await call();
    return null;
  } catch (e) {
    return { status: e.status_code, message: e.error ?? e.message };
  }
}
out.insert_refused = await refused(() => ollama.generate({ model: cfg.model, prompt: "def f(",
                                                           suffix: "return x", stream: false }));
out.embed_refused = await refused(() => ollama.embed({ model: cfg.model, input: "x" }));
await ollama.generate({ model: cfg.model, prompt: "", stream: false });
out.unload = (await ollama.generate({ model: cfg.model, prompt: "", keep_alive: 0,
                                      stream: false })).done_reason;
console.log(JSON.stringify(out));
