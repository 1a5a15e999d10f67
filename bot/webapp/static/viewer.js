// The thread viewer (see bot/webapp/). Message texts are data: they reach the page
// only as text nodes (textContent, createTextNode), never as markup.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const TELEGRAM_SCRIPT = "https://telegram.org/js/telegram-web-app.js";
  let T = {}; // the page's texts, from the server (bot/webapp/texts.py)
  let initData = "";
  let tree = null; // the skeleton: {chat, tree, selected, nodes, links}
  let kids = []; // children of each node, by index
  let onPath = new Set();
  const details = new Map(); // node index -> messages, once fetched

  // ------------------------------------------------------------ launch parameters

  /** Key/value pairs of the URL fragment, where Telegram passes the launch parameters. */
  function fragment() {
    return new URLSearchParams(location.hash.replace(/^#/, ""));
  }

  function telegram() {
    return window.Telegram && window.Telegram.WebApp ? window.Telegram.WebApp : null;
  }

  /** Loads Telegram's own script (themes, links, closing); resolves once it has
   *  loaded or failed, or after three seconds: the page needs none of it. */
  function loadTelegram() {
    return new Promise((resolve) => {
      const script = document.createElement("script");
      script.src = TELEGRAM_SCRIPT;
      script.async = true;
      script.addEventListener("load", resolve, { once: true });
      script.addEventListener("error", resolve, { once: true });
      setTimeout(resolve, 3000);
      document.head.appendChild(script);
    });
  }

  function startParam() {
    const signed = new URLSearchParams(initData).get("start_param");
    const query = new URLSearchParams(location.search);
    return signed || query.get("tgWebAppStartParam") || fragment().get("tgWebAppStartParam") || "";
  }

  function applyTheme(params, scheme) {
    const root = document.documentElement;
    for (const [key, value] of Object.entries(params || {})) {
      if (/^[a-z_]+$/.test(key) && /^#[0-9a-fA-F]{3,8}$/.test(String(value))) {
        root.style.setProperty("--tg-theme-" + key.replace(/_/g, "-"), value);
      }
    }
    if (scheme === "light" || scheme === "dark") root.dataset.scheme = scheme;
  }

  function themeFromFragment() {
    let params = {};
    try {
      params = JSON.parse(fragment().get("tgWebAppThemeParams") || "{}");
    } catch (_) {
      params = {};
    }
    const bg = String(params.bg_color || "");
    let scheme = "";
    if (/^#[0-9a-fA-F]{6}$/.test(bg)) {
      const [r, g, b] = [1, 3, 5].map((i) => parseInt(bg.slice(i, i + 2), 16));
      scheme = 0.299 * r + 0.587 * g + 0.114 * b < 128 ? "dark" : "light";
    }
    applyTheme(params, scheme);
  }

  function useTelegram() {
    const app = telegram();
    if (!app) return;
    applyTheme(app.themeParams, app.colorScheme);
    app.onEvent("themeChanged", () => applyTheme(app.themeParams, app.colorScheme));
    app.ready();
    app.expand();
  }

  // ------------------------------------------------------------------------ API

  async function api(path, query) {
    const url = "api/" + path + "?" + new URLSearchParams(query).toString();
    const response = await fetch(url, { headers: { Authorization: "tma " + initData } });
    let body = {};
    try {
      body = await response.json();
    } catch (_) {
      body = {};
    }
    if (!response.ok) throw new Error(body.error || response.status + " " + response.statusText);
    return body;
  }

  // --------------------------------------------------------------------- helpers

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fill(template, values) {
    return String(template || "").replace(/\{(\w+)\}/g, (_, name) =>
      name in values ? String(values[name]) : "{" + name + "}");
  }

  function toast(text) {
    const box = $("toast");
    box.textContent = text;
    box.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { box.hidden = true; }, 2500);
  }

  async function copy(text) {
    try {
      await navigator.clipboard.writeText(text);
      toast(T.copied);
      return;
    } catch (_) {
      // no clipboard API here: the old way below
    }
    const area = el("textarea");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    const done = document.execCommand && document.execCommand("copy");
    area.remove();
    toast(done ? T.copied : T.copy_failed);
  }

  function openLink(url, telegramLink) {
    const app = telegram();
    if (app && telegramLink && app.openTelegramLink) app.openTelegramLink(url);
    else if (app && app.openLink) app.openLink(url);
    else window.open(url, "_blank", "noopener");
  }

  // ---------------------------------------------------------- Markdown, as DOM

  const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*(.+?)\*\*|(?<!\w)__(.+?)__(?!\w)|\*([^*\s][^*]*?)\*|(?<!\w)_([^_\s][^_]*?)_(?!\w)|\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)|(https?:\/\/[^\s<>()]+)/g;

  /** Inline Markdown of one line into ``parent``: code, bold, italics, http(s) links. */
  function inline(parent, text) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      if (m[2] !== undefined) parent.appendChild(el("code", "", m[2]));
      else if (m[3] !== undefined || m[4] !== undefined) inline(parent.appendChild(el("strong")), m[3] || m[4]);
      else if (m[5] !== undefined || m[6] !== undefined) inline(parent.appendChild(el("em")), m[5] || m[6]);
      else {
        const url = m[8] || m[9];
        const link = el("a", "", m[7] || m[9]);
        link.href = url;
        link.rel = "noopener noreferrer";
        link.target = "_blank";
        link.addEventListener("click", (event) => { event.preventDefault(); openLink(url, false); });
        parent.appendChild(link);
      }
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  /** Markdown blocks: fenced code, headings, quotes, lists, paragraphs. */
  function markdown(text) {
    const out = document.createDocumentFragment();
    const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    let paragraph = null;
    let list = null;
    const endBlocks = () => { paragraph = null; list = null; };
    while (i < lines.length) {
      const line = lines[i];
      const fence = line.match(/^\s{0,3}(```|~~~)/);
      if (fence) {
        endBlocks();
        const code = [];
        i += 1;
        while (i < lines.length && !lines[i].trim().startsWith(fence[1])) code.push(lines[i++]);
        const pre = out.appendChild(el("pre"));
        pre.appendChild(el("code", "", code.join("\n")));
        i += 1;
        continue;
      }
      const heading = line.match(/^\s{0,3}(#{1,6})\s+(.*)$/);
      const item = line.match(/^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/);
      const quote = line.match(/^\s{0,3}>\s?(.*)$/);
      if (!line.trim()) {
        endBlocks();
      } else if (heading) {
        endBlocks();
        inline(out.appendChild(el("h" + Math.min(6, heading[1].length + 2))), heading[2]);
      } else if (item) {
        const ordered = /\d/.test(item[1]);
        if (!list || (list.tagName === "OL") !== ordered) list = out.appendChild(el(ordered ? "ol" : "ul"));
        paragraph = null;
        inline(list.appendChild(el("li")), item[2]);
      } else if (quote) {
        endBlocks();
        inline(out.appendChild(el("blockquote")), quote[1]);
      } else {
        list = null;
        if (paragraph) paragraph.appendChild(el("br"));
        else paragraph = out.appendChild(el("p"));
        inline(paragraph, line);
      }
      i += 1;
    }
    return out;
  }

  // ---------------------------------------------------------------------- tree

  function roleName(node) {
    return T["role_" + node.r] || node.r;
  }

  function metaText(node) {
    const parts = [fill(T.depth, { depth: node.d })];
    const used = node.u;
    if (used) {
      if (used.model) parts.push(used.model);
      if (used.at) parts.push(new Date(used.at * 1000).toLocaleString());
      parts.push(fill(T.tokens, { tokens: used.tokens }));
      if (used.cost !== undefined) parts.push(fill(T.cost, { cost: used.cost.toFixed(4) }));
      if (used.answers) parts.push(fill(T.shared, { calls: used.calls, answers: used.answers }));
    } else if (node.at) {
      parts.push(new Date(node.at * 1000).toLocaleString());
    }
    if (node.i) parts.push(fill(T.images, { count: node.i }));
    if (node.m) parts.push("#" + node.m);
    return parts.join(" · ");
  }

  function countBelow(index) {
    let count = 0;
    const stack = [...kids[index]];
    while (stack.length) {
      count += 1;
      stack.push(...kids[stack.pop()]);
    }
    return count;
  }

  function nodeRow(index) {
    const node = tree.nodes[index];
    const row = el("article", "node role-" + node.r);
    row.dataset.index = String(index);
    row.dataset.ref = node.k;
    if (onPath.has(index)) row.classList.add("on-path");
    if (index === tree.selected) {
      row.classList.add("selected");
      row.setAttribute("aria-current", "true");
      row.title = T.selected;
    }
    const head = row.appendChild(el("button", "head"));
    head.type = "button";
    head.setAttribute("aria-expanded", "false");
    head.appendChild(el("span", "role", roleName(node)));
    head.appendChild(el("span", "line", node.t));
    head.appendChild(el("span", "meta", metaText(node)));
    head.addEventListener("click", () => toggleNode(row, index));
    return row;
  }

  /** The nodes from ``start`` down while each has one child: one run of the tree. */
  function runFrom(start) {
    const run = [start];
    let at = start;
    while (kids[at].length === 1) {
      at = kids[at][0];
      run.push(at);
    }
    return run;
  }

  function foldBlock(node, rows) {
    const block = el("section", "fold");
    block.appendChild(el("h2", "", T.fold_title));
    const summary = block.appendChild(el("div", "summary body"));
    summary.appendChild(markdown(node.f.text));
    const toggle = block.appendChild(el("button", "toggle", T.show_originals + " (" + fill(T.folded, { count: rows.length }) + ")"));
    toggle.type = "button";
    const originals = block.appendChild(el("div", "originals"));
    originals.hidden = true;
    for (const row of rows) originals.appendChild(row);
    const flip = () => {
      originals.hidden = !originals.hidden;
      toggle.textContent = (originals.hidden ? T.show_originals : T.hide_originals) + " (" + fill(T.folded, { count: rows.length }) + ")";
    };
    toggle.addEventListener("click", flip);
    if (rows.some((row) => Number(row.dataset.index) === tree.selected)) flip();
    return block;
  }

  /** A run's rows (folds in place of what they summarise), then its branches. The
   *  branch on the highlighted path goes on below them at the same level, so a long
   *  path stays flat; the others open nested, built on their first opening. */
  function buildRun(start) {
    const box = el("div", "run");
    const run = runFrom(start);
    let pending = []; // rows since the run's start or its last fold
    for (const index of run) {
      const node = tree.nodes[index];
      const row = nodeRow(index);
      if (index === 0) {
        box.appendChild(row); // the system prompt stays in every view of the model's
        continue;
      }
      pending.push(row);
      if (node.f) {
        box.appendChild(foldBlock(node, pending));
        pending = [];
      }
    }
    for (const row of pending) box.appendChild(row);
    const last = run[run.length - 1];
    if (kids[last].length > 1) {
      const next = kids[last].find((child) => onPath.has(child));
      const continuation = next === undefined ? null : buildRun(next);
      box.appendChild(branches(last, next, continuation));
      if (continuation) box.appendChild(continuation);
    }
    return box;
  }

  function branches(parent, next, continuation) {
    const box = el("div", "branches");
    box.setAttribute("aria-label", fill(T.branches, { count: kids[parent].length }));
    for (const child of kids[parent]) {
      const node = tree.nodes[child];
      const branch = box.appendChild(el("div", "branch"));
      const toggle = branch.appendChild(el("button", "toggle"));
      toggle.type = "button";
      const below = fill(T.below, { count: countBelow(child) + 1 });
      const body = () => (child === next ? continuation : branch.querySelector(":scope > .run"));
      const label = () => {
        const open = Boolean(body()) && !body().hidden;
        toggle.textContent = (open ? "▾ " : "▸ ") + roleName(node) + ": " + node.t + " — " + below;
        toggle.setAttribute("aria-expanded", open ? "true" : "false");
      };
      if (child === next) branch.classList.add("on-path");
      toggle.addEventListener("click", () => {
        if (!body()) branch.appendChild(buildRun(child)); // built on first opening
        else body().hidden = !body().hidden;
        label();
      });
      label();
    }
    return box;
  }

  // --------------------------------------------------------------- node details

  async function load(index) {
    if (!details.has(index)) {
      const body = await api("nodes", { chat: tree.chat, tree: tree.tree, ids: tree.nodes[index].k });
      details.set(index, body.nodes[tree.nodes[index].k]);
    }
    return details.get(index);
  }

  function plainText(messages) {
    return messages.map((m) => {
      const calls = (m.calls || []).map((c) => c.name + "(" + c.args + ")");
      return [m.c, ...calls].filter(Boolean).join("\n");
    }).filter(Boolean).join("\n\n");
  }

  function renderMessages(box, messages) {
    for (const message of messages) {
      if (message.r === "tool") box.appendChild(el("div", "part-title", T.result + (message.name ? ": " + message.name : "")));
      if (message.c) {
        if (message.r === "tool") box.appendChild(el("pre", "", message.c));
        else box.appendChild(markdown(message.c));
      }
      for (const [width, height] of message.images || []) box.appendChild(el("span", "image", fill(T.image, { width, height })));
      if (message.calls && message.calls.length) {
        box.appendChild(el("div", "part-title", T.calls));
        for (const call of message.calls) box.appendChild(el("pre", "call", call.name + "(" + call.args + ")"));
      }
    }
  }

  async function toggleNode(row, index) {
    const head = row.querySelector(".head");
    const open = row.querySelector(".body");
    if (open) {
      open.remove();
      head.setAttribute("aria-expanded", "false");
      return;
    }
    const body = row.appendChild(el("div", "body", T.loading));
    head.setAttribute("aria-expanded", "true");
    let messages;
    try {
      messages = await load(index);
    } catch (error) {
      body.textContent = error.message;
      return;
    }
    body.textContent = "";
    renderMessages(body, messages);
    const actions = body.appendChild(el("div", "actions"));
    const button = (label, action) => {
      const b = actions.appendChild(el("button", "", label));
      b.type = "button";
      b.addEventListener("click", action);
      return b;
    };
    button(T.copy, () => copy(plainText(messages))).dataset.action = "copy";
    button(T.export, () => exportBranch(index)).dataset.action = "export";
    button(T.continue, () => continueHere(index)).dataset.action = "continue";
  }

  // ------------------------------------------------------------------- panels

  function panel(title, build) {
    $("panel-title").textContent = title;
    const body = $("panel-body");
    const actions = $("panel-actions");
    body.textContent = "";
    actions.textContent = "";
    build(body, actions);
    const close = actions.appendChild(el("button", "", T.close));
    close.type = "button";
    close.addEventListener("click", () => { $("panel").hidden = true; });
    $("panel").hidden = false;
  }

  async function exportBranch(index) {
    let body;
    try {
      body = await api("export", { chat: tree.chat, tree: tree.tree, node: tree.nodes[index].k });
    } catch (error) {
      toast(error.message);
      return;
    }
    panel(T.export_title, (box, actions) => {
      box.appendChild(el("pre", "export", body.markdown));
      const copyButton = actions.appendChild(el("button", "", T.copy));
      copyButton.type = "button";
      copyButton.addEventListener("click", () => copy(body.markdown));
      const download = actions.appendChild(el("a", "", T.download));
      download.href = URL.createObjectURL(new Blob([body.markdown], { type: "text/markdown" }));
      download.download = body.name;
    });
  }

  function continueHere(index) {
    const node = tree.nodes[index];
    const links = tree.links || {};
    panel(T.continue, (box, actions) => {
      if (!node.m) {
        box.appendChild(el("p", "", T.no_message));
        return;
      }
      if (links.kind === "none" || !links.continue) {
        box.appendChild(el("p", "", fill(T.continue_none, { message: node.m })));
        return;
      }
      box.appendChild(el("p", "", links.kind === "private" ? T.continue_private : T.continue_group));
      const url = links.continue + node.m;
      const link = actions.appendChild(el("a", "", T.continue));
      link.href = url;
      link.dataset.action = "open-chat";
      link.addEventListener("click", (event) => { event.preventDefault(); openLink(url, true); });
    });
  }

  // ---------------------------------------------------------------------- start

  function showError(text) {
    const main = $("tree");
    main.textContent = "";
    main.appendChild(el("p", "error", text));
    main.setAttribute("aria-busy", "false");
  }

  function render() {
    kids = tree.nodes.map(() => []);
    tree.nodes.forEach((node, index) => { if (node.p >= 0) kids[node.p].push(index); });
    onPath = new Set();
    for (let at = tree.selected; at >= 0; at = tree.nodes[at].p) onPath.add(at);
    document.title = T.title;
    $("title").textContent = T.title;
    const leaves = kids.filter((k) => k.length === 0).length;
    $("summary").textContent = fill(T.summary, { nodes: tree.nodes.length, branches: leaves });
    const main = $("tree");
    main.textContent = "";
    main.appendChild(buildRun(0));
    main.setAttribute("aria-busy", "false");
    const selected = main.querySelector(".node.selected");
    if (selected) selected.scrollIntoView({ block: "center" });
    performance.mark("tree-ready"); // bench/viewer_bench.py reads it
    document.documentElement.dataset.ready = "true";
  }

  async function start() {
    themeFromFragment();
    initData = fragment().get("tgWebAppData") || "";
    const telegramLoaded = loadTelegram().then(useTelegram);
    if (!initData) {
      await telegramLoaded; // launched without the fragment: only the script knows initData
      initData = (telegram() && telegram().initData) || "";
    }
    const match = startParam().match(/^(-?\d{1,20})_(\d{1,12})$/);
    try {
      tree = await api("tree", match ? { chat: match[1], message: match[2] } : {});
      performance.mark("tree-fetched");
    } catch (error) {
      showError(error.message);
      document.documentElement.dataset.ready = "error";
      return;
    }
    T = tree.texts;
    render();
  }

  start();
})();
