// Embeddings through LangChain's OllamaEmbeddings (@langchain/ollama, pinned by
// test_httpd.py), as RAG apps built on LangChain index documents: embedDocuments() for a
// list and embedQuery() for the question. argv[2]: {"host", "model", "docs", "query"}.
// Prints one JSON document.
import { OllamaEmbeddings } from "@langchain/ollama";

const cfg = JSON.parse(process.argv[2]);
const e = new OllamaEmbeddings({ model: cfg.model, baseUrl: cfg.host });
const out = {};
out.docs = await e.embedDocuments(cfg.docs);
out.query = await e.embedQuery(cfg.query);
console.log(JSON.stringify(out));
