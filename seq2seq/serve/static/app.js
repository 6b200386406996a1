// The attention page: one panel per model (GET /models), filled by POST /translate.
// Weights arrive as [layer][head][target][source]; a panel shows one layer and head (or their
// mean) as a target x source map, and the row of the chosen target token over the source.
"use strict";

const COLORS = { transformer: [36, 86, 201], rnnsearch: [180, 70, 31], ensemble: [90, 79, 176] };
const state = { models: [], panels: new Map() };

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

// A subword piece as shown: SentencePiece marks a word's first piece with "▁"; the others
// (a word's continuation) get a class of their own.
function piece(token, attributes) {
  const start = token.startsWith("\u2581");
  const node = element("span", attributes, start ? token.slice(1) : token);
  if (!start && !token.startsWith("<")) node.classList.add("continuation");
  return node;
}

function setStatus(message, isError = false) {
  const status = document.getElementById("status");
  status.textContent = message;
  status.classList.toggle("error", isError);
}

function milliseconds(seconds) {
  return `${(seconds * 1000).toFixed(seconds < 0.1 ? 1 : 0)} ms`;
}

// The [T][S] map of one layer and head; "mean" averages over that axis (rows still sum to 1).
function view(weights, layer, head) {
  const layers = layer === "mean" ? weights : [weights[Number(layer)]];
  const picked = [];
  for (const heads of layers) {
    for (const map of head === "mean" ? heads : [heads[Number(head)]]) picked.push(map);
  }
  return picked[0].map((row, t) =>
    row.map((_, s) => picked.reduce((sum, map) => sum + map[t][s], 0) / picked.length));
}

function shade(cell, weight, rgb) {
  const alpha = Math.pow(Math.max(0, Math.min(1, weight)), 0.65);
  cell.style.background = `rgba(${rgb.join(",")}, ${alpha.toFixed(3)})`;
  cell.style.color = alpha > 0.55 ? "white" : "";
  cell.dataset.weight = weight.toFixed(4);
}

function buildPanel(card) {
  // [text, emphasised]: every string is set as text, never parsed as HTML
  const facts = [
    [card.parameters.toLocaleString("en"), true], [" parameters · ", false],
    [`${card.size} · checkpoint ${card.checkpoint} · `, false],
    ...(card.test_bleu == null ? [["no test BLEU yet", false]]
      : [["test BLEU ", false], [card.test_bleu.toFixed(1), true]]),
    [` · beam ${card.beam_size}, α ${card.alpha}`, false],
  ];
  const factsNode = element("div", { class: "facts" },
    ...facts.map(([text, bold]) => (bold ? element("b", { text }) : text)));
  const panel = element("section", {
    class: "card model-panel", "data-model": card.name, "data-family": card.family,
  },
    element("div", { class: "model-head" },
      element("span", { class: "model-name", text: card.name }),
      element("span", { class: "badge", text: card.family })),
    factsNode,
    element("div", { class: "translation" }),
    element("div", { class: "translation-text" }),
    element("div", { class: "timing" }),
    element("div", { class: "attention" }));
  const entry = { card, panel, result: null, layer: "last", head: "mean", selected: 0, pinned: null };
  state.panels.set(card.name, entry);
  return panel;
}

function renderControls(entry, attention) {
  const controls = element("div", { class: "controls" });
  if (attention.layers * attention.heads === 1) {
    controls.append(element("span", { class: "dim", text: "one alignment per output token (Bahdanau et al. 2015, Eq. 6)" }));
    return controls;
  }
  const layer = element("select", { class: "layer-select", "aria-label": "decoder layer" });
  layer.append(element("option", { value: "mean", text: "mean of layers" }));
  for (let l = 0; l < attention.layers; l++) layer.append(element("option", { value: String(l), text: `layer ${l + 1}` }));
  const head = element("select", { class: "head-select", "aria-label": "attention head" });
  head.append(element("option", { value: "mean", text: "mean of heads" }));
  for (let h = 0; h < attention.heads; h++) head.append(element("option", { value: String(h), text: `head ${h + 1}` }));
  layer.value = entry.layer;
  head.value = entry.head;
  layer.addEventListener("change", () => { entry.layer = layer.value; renderAttention(entry); });
  head.addEventListener("change", () => { entry.head = head.value; renderAttention(entry); });
  controls.append(element("label", { text: "Decoder cross-attention: " }), layer, head);
  return controls;
}

function renderAttention(entry) {
  const box = entry.panel.querySelector(".attention");
  box.replaceChildren();
  const translation = entry.result && entry.result.translations[0];
  const attention = translation && translation.attention;
  if (!attention) {
    if (translation) box.append(element("p", { class: "no-attention", text: "This model has no attention to show (an ensemble, or RNNencdec's one fixed context)." }));
    return;
  }
  const rgb = COLORS[entry.card.family] || COLORS.transformer;
  if (entry.layer === "last" || Number(entry.layer) >= attention.layers) entry.layer = String(attention.layers - 1);
  box.append(renderControls(entry, attention));
  const map = view(attention.weights, entry.layer, entry.head);  // [T][S]
  entry.map = map;

  box.append(element("div", { class: "section-title", text: "where the chosen output token looks" }));
  const strip = element("div", { class: "source-strip" });
  attention.source_tokens.forEach((token, s) => {
    strip.append(element("span", { class: "source-cell", "data-index": String(s) },
      piece(token, { class: "piece" }),
      element("span", { class: "weight" })));
  });
  box.append(strip);

  box.append(element("div", { class: "section-title", text: "the whole map: output tokens × source tokens" }));
  const table = element("table", { class: "matrix" });
  const head = element("tr", {}, element("th"));
  for (const token of attention.source_tokens) head.append(element("th", {}, piece(token, {})));
  table.append(element("thead", {}, head));
  const body = element("tbody");
  map.forEach((row, t) => {
    const tr = element("tr", { "data-index": String(t) }, element("th", {}, piece(attention.target_tokens[t], {})));
    row.forEach((weight, s) => {
      const td = element("td", { title: `${attention.target_tokens[t]} → ${attention.source_tokens[s]}: ${weight.toFixed(3)}` });
      shade(td, weight, rgb);
      tr.append(td);
    });
    tr.addEventListener("mouseenter", () => select(entry, t));
    tr.addEventListener("click", () => pin(entry, t));
    body.append(tr);
  });
  table.append(body);
  box.append(element("div", { class: "matrix-wrap" }, table));
  select(entry, entry.pinned ?? entry.selected);
}

// Shows target token t's row: the source strip's cells take its weights.
function select(entry, t) {
  if (!entry.map || t >= entry.map.length) return;
  entry.selected = t;
  const rgb = COLORS[entry.card.family] || COLORS.transformer;
  entry.panel.querySelectorAll(".source-cell").forEach((cell, s) => {
    const weight = entry.map[t][s];
    shade(cell, weight, rgb);
    cell.querySelector(".weight").textContent = `${Math.round(weight * 100)}%`;
  });
  entry.panel.querySelectorAll(".target-token").forEach((token, i) => token.classList.toggle("selected", i === t));
  entry.panel.querySelectorAll(".matrix tbody tr").forEach((row, i) => row.classList.toggle("selected", i === t));
}

function pin(entry, t) {
  entry.pinned = entry.pinned === t ? null : t;
  entry.panel.querySelectorAll(".target-token").forEach((token, i) => token.classList.toggle("pinned", i === entry.pinned));
  select(entry, t);
}

function renderResult(entry, result, requestSeconds) {
  entry.result = result;
  entry.pinned = null;
  entry.selected = 0;
  const translation = result.translations[0];
  const tokens = translation.attention ? translation.attention.target_tokens : translation.text.split(" ").filter(Boolean);
  const line = entry.panel.querySelector(".translation");
  line.replaceChildren();
  tokens.forEach((token, t) => {
    const node = piece(token, { class: "token target-token", "data-index": String(t) });
    node.addEventListener("mouseenter", () => select(entry, t));
    node.addEventListener("mouseleave", () => { if (entry.pinned !== null) select(entry, entry.pinned); });
    node.addEventListener("click", () => pin(entry, t));
    line.append(node);
  });
  entry.panel.querySelector(".translation-text").textContent = translation.text;
  const timing = [
    ...(translation.capped ? ["cut off at the output length cap, unfinished"] : []),
    `score ${translation.score == null ? "–" : translation.score.toFixed(3)} (log P / lp)`,
    `search ${milliseconds(result.search_seconds)} for a batch of ${result.batch_sentences}`,
    `attention ${milliseconds(result.attention_seconds)}`,
    `request ${milliseconds(requestSeconds)}`,
  ];
  const timingNode = entry.panel.querySelector(".timing");
  timingNode.textContent = timing.join(" · ");
  if (translation.nbest && translation.nbest.length > 1) {
    const list = element("ol");
    for (const candidate of translation.nbest) list.append(element("li", { text: `${candidate.text}  (${candidate.score.toFixed(3)})` }));
    timingNode.append(element("details", { class: "nbest" }, element("summary", { text: `the beam's ${translation.nbest.length} best` }), list));
  }
  renderAttention(entry);
}

async function translate(event) {
  event && event.preventDefault();
  const text = document.getElementById("source").value;
  if (!text.trim()) { setStatus("Type a sentence first.", true); return; }
  if (/[\n\r\u2028\u2029]/.test(text.trim())) {  // the API's refusal names "sentence 0"
    setStatus("The page translates one sentence: put it on one line (eval.py --input translates a file).", true);
    return;
  }
  const button = document.getElementById("translate");
  button.disabled = true;
  setStatus("Translating…");
  const beams = state.models.map((card) => card.beam_size);
  try {
    const response = await fetch("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ sentences: [text], attention: true, nbest: Math.min(4, ...beams) }),
    });
    const payload = await response.json();
    if (!response.ok) { setStatus(payload.error || `error ${response.status}`, true); return; }
    for (const result of payload.results) renderResult(state.panels.get(result.model), result, payload.seconds);
    setStatus(`Translated in ${milliseconds(payload.seconds)}. Hover or click an output token.`);
  } catch (error) {
    setStatus(`The server did not answer (${error.message}).`, true);
  } finally {
    button.disabled = false;
  }
}

async function start() {
  const response = await fetch("/models");
  const { models } = await response.json();
  state.models = models;
  const container = document.getElementById("models");
  for (const card of models) container.append(buildPanel(card));
  const first = models[0];
  if (first) document.getElementById("languages").textContent = `(${first.languages[0]} → ${first.languages[1]})`;
  const examples = document.getElementById("examples");
  const seen = new Set();
  for (const card of models) {
    for (const sentence of card.examples) {
      if (seen.has(sentence)) continue;
      seen.add(sentence);
      const chip = element("button", { class: "example", type: "button", text: sentence });
      chip.addEventListener("click", () => { document.getElementById("source").value = sentence; translate(); });
      examples.append(chip);
    }
  }
  document.getElementById("translate-form").addEventListener("submit", translate);
  document.getElementById("source").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) translate(event);
  });
  document.body.dataset.ready = "true";
}

start();
