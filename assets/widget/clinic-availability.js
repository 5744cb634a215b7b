// <clinic-availability>: free appointment times, kept live, for any web page: one doctor's day,
// or the earliest free times of a specialty across its doctors.
//
//   <script type="module" src="https://clinic.example.com/widget/clinic-availability.js"></script>
//   <clinic-availability doctor-id="12"></clinic-availability>
//   <clinic-availability specialty="Dermatology" days="7"></clinic-availability>
//
// Served by clinic-booking at /widget/clinic-availability.js (docs/widget.md says everything an
// embedder needs). Hand-written, no dependencies and no build step: this file is what browsers
// run. The list is read over HTTP (POST /graphql); changes arrive over WebSocket
// (graphql-transport-ws, /graphql/ws) and are applied by each slot's `version`, so a repeated or
// late event never undoes a newer state. After a lost connection it reconnects with backoff and
// reads the list again; while connected it never polls.

/** The service the module was loaded from (path prefix included): the default `endpoint`. */
const SERVICE = new URL('..', import.meta.url);
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 30_000;
/** A connection that stayed up this long starts its next outage's backoff afresh. */
const STABLE_MS = 10_000;
/** Refusals that retrying cannot cure. */
const FINAL_CODES = new Set(['BAD_REQUEST', 'INVALID_INPUT']);

const SLOT = 'id startAt endAt available capacity closed version';
/** Subscriptions one widget opens at most (the service allows 100 operations per socket). */
const MAX_WATCHED = 90;
/** The longest window `findSlots` searches, in days. */
const MAX_DAYS = 31;
const Q_DOCTOR = 'query($id:ID!){doctor(id:$id){id name timezone}}';
const Q_LIST = `query($d:ID!,$date:Date!,$n:Int){availableSlots(doctorId:$d,date:$date,durationMinutes:$n){${SLOT}}}`;
const Q_SLOT = `query($id:ID!){slot(id:$id){${SLOT}}}`;
const S_CHANGES =
  'subscription($d:ID!,$date:Date){slotAvailability(doctorId:$d,date:$date){slotId startAt available closed version}}';
const Q_FIND = `query($i:FindSlotsInput!,$n:Int){findSlots(input:$i,first:$n){nodes{${SLOT} doctor{id name timezone}}}}`;
const Q_SLOT_DOCTOR = `query($id:ID!){slot(id:$id){${SLOT} doctor{id name timezone}}}`;

/** Every word the element shows or announces, in one place for translations. */
const TEXT = {
  loading: 'Loading free times…',
  none: 'No free times left on this day.',
  noneIn: (days) => `No free times in the next ${days} ${days === 1 ? 'day' : 'days'}.`,
  next: (days) => `Earliest free times, next ${days} ${days === 1 ? 'day' : 'days'}`,
  noSource: 'No doctor or specialty chosen for this calendar.',
  unknown: (id) => `No doctor with id ${id}.`,
  failed: 'Free times could not be loaded. Trying again…',
  broken: 'Free times could not be loaded.',
  zone: (zone, offset) => `Times in ${zone} (${offset})`,
  zoneShort: (zone) => ` ${zone} time`,
  seats: (n) => `${n} ${n === 1 ? 'seat' : 'seats'} left`,
  gone: (time) => `${time} is no longer available`,
  back: (time) => `${time} is available again`,
  fresh: (time) => `${time} is now available`,
};

const CSS = `
:host{all:initial;display:block}
:host([hidden]){display:none}
.w{all:initial;display:block;position:relative;box-sizing:border-box;padding:12px;
  font:14px/1.4 var(--clinic-font,system-ui,-apple-system,"Segoe UI",Roboto,sans-serif);
  color:var(--clinic-color,#1f2328);background:var(--clinic-background,#fff);border-radius:var(--clinic-radius,6px)}
.title{margin:0 0 8px}
.name{display:block;font-weight:600;font-size:1.15em}
.zone{margin:0 0 8px;font-size:.9em}
ul{display:flex;flex-wrap:wrap;gap:8px;margin:0;padding:0;list-style:none}
li{display:block;margin:0;padding:0}
button{box-sizing:border-box;display:flex;flex-direction:column;align-items:center;justify-content:center;
  min-width:5.5em;min-height:44px;margin:0;padding:6px 12px;font:inherit;font-weight:600;cursor:pointer;
  color:var(--clinic-accent,#0b5cad);background:var(--clinic-background,#fff);appearance:none;
  border:1px solid var(--clinic-accent,#0b5cad);border-radius:var(--clinic-radius,6px)}
button:hover{color:var(--clinic-background,#fff);background:var(--clinic-accent,#0b5cad)}
button:focus-visible{outline:3px solid var(--clinic-accent,#0b5cad);outline-offset:2px}
.seats,.day,.doc,.tz{font-size:.8em;font-weight:400}
.status{margin:8px 0 0}
.status:empty,[hidden]{display:none}
.sr{position:absolute;width:1px;height:1px;margin:-1px;padding:0;border:0;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
`;

const TEMPLATE = `<div class="w" part="container">
<p class="title" part="title" id="title" tabindex="-1"><span class="name" id="name"></span> <span id="day"></span></p>
<p class="zone" part="zone" id="zone" hidden></p>
<ul role="list" part="list" id="list" aria-labelledby="title" hidden></ul>
<p class="status" part="status" id="status"></p>
<div class="sr" id="live" aria-live="polite"></div>
</div>`;

/** The element's styles, one sheet shared by every instance (where browsers can share one). */
let sheet = null;

/** A failure: `message` (the detail) goes to the console; `shown` (or a generic line) to the page. */
class Problem extends Error {
  constructor(detail, { final = false, shown = null } = {}) {
    super(detail);
    this.final = final;
    this.shown = shown;
  }
}

/** Runs one GraphQL operation over HTTP; resolves to its `data`. */
async function graphql(endpoint, query, variables, signal) {
  const url = new URL('graphql', endpoint);
  let response;
  try {
    response = await fetch(url, {
      method: 'POST',
      mode: 'cors',
      credentials: 'omit',
      signal,
      headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json, application/json' },
      body: JSON.stringify({ query, variables }),
    });
  } catch (error) {
    if (signal.aborted) throw error;
    throw new Problem(`POST ${url} failed: ${error.message}`);
  }
  const body = await response.json().catch(() => null);
  if (response.ok && body?.data && !body.errors) return body.data;
  const final = response.status === 400 || !!body?.errors?.some((e) => FINAL_CODES.has(e.extensions?.code));
  throw new Problem(`POST ${url} answered ${response.status}: ${JSON.stringify(body?.errors ?? body)}`, { final });
}

/**
 * Where a mode's slots come from. A mode `applies` to an element by its attributes; its
 * `source` says what it shows (`describe`), reads the list (`list`) and one slot (`slot`), names
 * the subscriptions that tell the changes of the slots it shows (`subscriptions(rows)`, asked
 * again after every read), and says whether a change may move other slots in or out (`runs`:
 * then the list is read again on every change).
 */
const MODES = [
  { applies: (el) => !!attr(el, 'doctor-id'), source: doctorSource },
  { applies: (el) => !!attr(el, 'specialty'), source: specialtySource },
];

/** A whole number of minutes from `duration-minutes`, or null; throws when malformed. */
function durationOf(el) {
  const minutes = attr(el, 'duration-minutes');
  if (minutes == null) return null;
  const duration = Number(minutes);
  if (!(Number.isInteger(duration) && duration > 0)) {
    throw new Problem(`duration-minutes="${minutes}" is not a whole number of minutes`, { final: true });
  }
  return duration;
}

/** One doctor's day (`doctor-id`, `date`, `duration-minutes`). */
function doctorSource(el, gql) {
  const id = attr(el, 'doctor-id');
  const runs = attr(el, 'duration-minutes') != null;
  let duration;
  let doctor;
  let date;
  return {
    runs,
    async describe() {
      duration = durationOf(el);
      const found = (await gql(Q_DOCTOR, { id })).doctor;
      if (!found) throw new Problem(`there is no doctor with id ${id}`, { final: true, shown: TEXT.unknown(id) });
      doctor = found;
      date = attr(el, 'date') ?? today(found.timezone);
      if (!/^\d{4}-\d{2}-\d{2}$/.test(date)) throw new Problem(`date="${date}" is not YYYY-MM-DD`, { final: true });
      return { title: found.name, date, zone: found.timezone };
    },
    list: async () => (await gql(Q_LIST, { d: id, date, n: duration })).availableSlots.map((s) => ({ ...s, doctor })),
    async slot(slotId) {
      const found = (await gql(Q_SLOT, { id: slotId })).slot;
      return found && { ...found, doctor };
    },
    subscriptions: () => [{ query: S_CHANGES, variables: { d: id, date } }],
  };
}

/**
 * A specialty's earliest free times across its doctors (`specialty`, `days`, `max`,
 * `duration-minutes`), read through `findSlots`. Changes come from the days, each in its
 * doctor's zone, of the slots it has shown (the service has no subscription by specialty): a
 * shown slot that fills or closes goes at once, and every change read again brings the next
 * earliest; a time freed on a day not shown appears at the next read.
 */
function specialtySource(el, gql) {
  const specialty = attr(el, 'specialty');
  let duration;
  let days;
  return {
    runs: true,
    wide: true,
    async describe() {
      duration = durationOf(el);
      const raw = attr(el, 'days') ?? '7';
      days = Number(raw);
      if (!(Number.isInteger(days) && days > 0 && days <= MAX_DAYS)) {
        throw new Problem(`days="${raw}" is not a whole number of days from 1 to ${MAX_DAYS}`, { final: true });
      }
      return { title: specialty, when: TEXT.next(days), none: TEXT.noneIn(days) };
    },
    async list() {
      // Whole minutes: every page showing the specialty within a minute sends the same request,
      // which the service answers from memory (a past `from` counts as now).
      const from = new Date(Math.floor(Date.now() / 60_000) * 60_000);
      const to = new Date(from.getTime() + days * 86_400_000);
      const max = Number(attr(el, 'max') ?? 20);
      const first = Number.isInteger(max) && max > 0 ? Math.min(max, 100) : 20;
      const input = { from: from.toISOString(), to: to.toISOString(), specialty, durationMinutes: duration };
      return (await gql(Q_FIND, { i: input, n: first })).findSlots.nodes;
    },
    slot: async (slotId) => (await gql(Q_SLOT_DOCTOR, { id: slotId })).slot,
    subscriptions: (rows) =>
      [...rows.values()].map((s) => ({ query: S_CHANGES, variables: { d: s.doctor.id, date: dayIn(s.doctor.timezone, s.startAt) } })),
  };
}

/** One graphql-transport-ws connection, reconnecting with backoff until `close`. */
class Socket {
  #url;
  #subscriptions = [];
  #keys = new Set();
  #on;
  #ws = null;
  #timer = 0;
  #tries = 0;
  #acks = 0;
  #ackedAt = 0;
  #live = false;

  constructor(url, subscriptions, on) {
    this.#url = url;
    this.#on = on;
    this.follow(subscriptions);
    this.#open();
  }

  /** Adds the subscriptions not yet open (kept across reconnects), up to MAX_WATCHED. */
  follow(subscriptions) {
    for (const payload of subscriptions) {
      const key = JSON.stringify(payload);
      if (this.#keys.has(key) || this.#subscriptions.length >= MAX_WATCHED) continue;
      this.#keys.add(key);
      this.#subscriptions.push(payload);
      const id = String(this.#subscriptions.length);
      if (this.#live) this.#ws.send(JSON.stringify({ id, type: 'subscribe', payload }));
    }
  }

  #open() {
    let ws;
    try {
      ws = this.#ws = new WebSocket(this.#url, 'graphql-transport-ws');
    } catch (error) {
      // Refused by the page itself (a ws: URL on an https: page): retrying cannot help.
      return console.error('<clinic-availability>: no live updates:', error.message);
    }
    ws.onopen = () => ws.send(JSON.stringify({ type: 'connection_init', payload: {} }));
    ws.onmessage = (m) => this.#message(ws, m.data);
    ws.onclose = (e) => this.#ws === ws && this.#retry(`closed (${e.code})`);
  }

  #message(ws, data) {
    let m;
    try {
      m = JSON.parse(data);
    } catch {
      return;
    }
    if (m.type === 'connection_ack') {
      this.#ackedAt = performance.now();
      this.#live = true;
      this.#subscriptions.forEach((payload, i) => ws.send(JSON.stringify({ id: String(i + 1), type: 'subscribe', payload })));
      this.#on.ready(this.#acks++ > 0);
    } else if (m.type === 'next') {
      if (m.payload?.errors) console.error('<clinic-availability>: live update refused:', m.payload.errors);
      else this.#on.change(m.payload?.data);
    } else if (m.type === 'ping') {
      ws.send(JSON.stringify({ type: 'pong' }));
    } else if (m.type === 'error' || m.type === 'complete') {
      // The server ended the subscription: a fresh connection subscribes again.
      if (m.type === 'error') console.error('<clinic-availability>: live updates refused:', m.payload);
      this.#ws = null;
      ws.close(1000);
      this.#retry(m.type);
    }
  }

  #retry(why) {
    this.#live = false;
    if (this.#ackedAt && performance.now() - this.#ackedAt > STABLE_MS) this.#tries = 0;
    this.#ackedAt = 0;
    this.#ws = null;
    const wait = backoff(this.#tries++);
    console.warn(`<clinic-availability>: live updates ${why}; reconnecting in ${Math.round(wait)} ms`);
    this.#timer = setTimeout(() => this.#open(), wait);
  }

  close() {
    this.#live = false;
    clearTimeout(this.#timer);
    const ws = this.#ws;
    this.#ws = null;
    ws?.close(1000);
  }
}

/** The element. */
class ClinicAvailability extends HTMLElement {
  static observedAttributes = ['doctor-id', 'date', 'duration-minutes', 'endpoint', 'specialty', 'days', 'max', 'locale'];

  #root;
  #el = {};
  /** The `<li>` of each slot shown, by slot id: kept across renders so focus stays put. */
  #items = new Map();
  /** What the current configuration is doing; a fresh object per start, so late answers of an earlier one are ignored. */
  #run = null;
  #restart = false;

  constructor() {
    super();
    const root = (this.#root = this.attachShadow({ mode: 'open' }));
    // A constructed sheet is not inline style: pages with a strict CSP need no 'unsafe-inline'.
    if (root.adoptedStyleSheets) {
      if (!sheet) {
        sheet = new CSSStyleSheet();
        sheet.replaceSync(CSS);
      }
      root.adoptedStyleSheets = [sheet];
      root.innerHTML = TEMPLATE;
    } else {
      root.innerHTML = `<style>${CSS}</style>${TEMPLATE}`;
    }
    for (const id of ['title', 'name', 'day', 'zone', 'list', 'status', 'live']) this.#el[id] = root.getElementById(id);
    this.#el.list.addEventListener('click', (e) => {
      const button = e.target.closest('button');
      if (button) this.#choose(button.dataset.slot);
    });
    this.#el.list.addEventListener('keydown', (e) => this.#arrow(e));
  }

  connectedCallback() {
    this.#start();
  }

  disconnectedCallback() {
    this.#stop();
  }

  attributeChangedCallback(name, before, after) {
    // Before the first start (parsing, upgrade) the start reads every attribute anyway.
    if (before === after || !this.#run) return;
    // A specialty's list is read `max` at a time: a new `max` reads it again.
    if (name === 'locale' || (name === 'max' && !this.#run.source?.wide)) return this.#render(this.#run);
    if (this.#restart) return;
    // Several attributes set in one go restart once.
    this.#restart = true;
    queueMicrotask(() => {
      this.#restart = false;
      if (this.isConnected) this.#start();
    });
  }

  #start() {
    this.#stop();
    const run = (this.#run = {
      ac: new AbortController(),
      known: new Map(), // slot id → newest state seen ({startAt, available, closed, version})
      rows: new Map(), // slot id → slot offered
      ever: new Set(), // slots offered at some point (a returning one is "available again")
      fetching: new Set(),
      shown: null, // the offered slots at the last render, once the list was read
      ready: false,
      tries: 0,
    });
    this.#items.clear();
    this.#el.list.replaceChildren();
    this.#el.live.replaceChildren();
    const mode = MODES.find((m) => m.applies(this));
    if (!mode) {
      console.error("<clinic-availability>: set doctor-id (a doctor's day) or specialty (its earliest free times)");
      return this.#showProblem(run, TEXT.noSource);
    }
    try {
      run.endpoint = serviceRoot(attr(this, 'endpoint'));
    } catch {
      console.error(`<clinic-availability>: endpoint="${attr(this, 'endpoint')}" is not a URL`);
      return this.#showProblem(run, TEXT.broken);
    }
    run.source = mode.source(this, (query, variables) => graphql(run.endpoint, query, variables, run.ac.signal));
    this.#render(run);
    this.#begin(run);
  }

  #stop() {
    const run = this.#run;
    if (!run) return;
    this.#run = null;
    run.ac.abort();
    run.socket?.close();
    clearTimeout(run.retry);
    clearTimeout(run.prune);
  }

  async #begin(run) {
    try {
      run.meta = await run.source.describe();
    } catch (error) {
      return this.#failed(run, error, () => this.#begin(run));
    }
    if (this.#run !== run) return;
    run.problem = null;
    run.tries = 0;
    this.#read(run);
    const url = new URL('graphql/ws', run.endpoint);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    run.socket = new Socket(url, run.source.subscriptions(run.rows), {
      change: (data) => this.#change(run, data),
      // After a reconnect the list may have changed unseen; after a failed read, the service
      // is back: no need to wait for that read's retry.
      ready: (again) => (again || run.problem) && this.#read(run),
    });
  }

  /** Reads the list; calls made while a read runs are folded into one more read after it. */
  async #read(run) {
    if (run.reading) {
      run.again = true;
      return;
    }
    run.reading = true;
    try {
      const list = await run.source.list();
      if (this.#run !== run) return;
      clearTimeout(run.retry);
      run.tries = 0;
      run.problem = null;
      const rows = new Map();
      for (const slot of list) if (this.#merge(run, slot)) rows.set(slot.id, slot);
      run.rows = rows;
      run.ready = true;
      run.socket?.follow(run.source.subscriptions(rows));
      // A change seen but missing from the list: the list was older (a cache), so ask the slot.
      if (!run.source.runs) for (const [id, known] of run.known) if (!rows.has(id) && offerable(known)) this.#fetch(run, id);
      this.#render(run);
    } catch (error) {
      this.#failed(run, error, () => this.#read(run));
    } finally {
      run.reading = false;
      if (run.again && this.#run === run) {
        run.again = false;
        this.#read(run);
      }
    }
  }

  /** Takes a slot read over HTTP, unless a newer state was seen; true when it is offered. */
  #merge(run, slot) {
    const known = run.known.get(slot.id);
    if (known && known.version > slot.version) {
      Object.assign(slot, { available: known.available, closed: known.closed, version: known.version });
    } else {
      run.known.set(slot.id, slot);
    }
    return offerable(slot);
  }

  #change(run, data) {
    const change = data?.slotAvailability;
    if (!change || this.#run !== run) return;
    const known = run.known.get(change.slotId);
    if (known && known.version >= change.version) return;
    run.known.set(change.slotId, change);
    const row = run.rows.get(change.slotId);
    if (row && offerable(change)) Object.assign(row, { available: change.available, version: change.version });
    else if (row) run.rows.delete(change.slotId);
    // Across a specialty, a slot first seen full or closed (a subscription's first state) changes nothing read.
    if (run.source.runs) (known || offerable(change) || !run.source.wide) && this.#read(run);
    else if (!row && run.ready && offerable(change)) this.#fetch(run, change.slotId);
    this.#render(run);
  }

  /** A slot that freed and is not listed: its times come from the service. */
  async #fetch(run, id) {
    if (run.fetching.has(id)) return;
    run.fetching.add(id);
    try {
      const slot = await run.source.slot(id);
      if (this.#run === run && slot && this.#merge(run, slot)) {
        run.rows.set(id, slot);
        this.#render(run);
      }
    } catch (error) {
      if (this.#run !== run) return;
      console.error('<clinic-availability>:', error.message);
      this.#read(run);
    } finally {
      run.fetching.delete(id);
    }
  }

  /** A read failed: say so, log why, and try `again` later unless retrying cannot help. */
  #failed(run, error, again) {
    if (this.#run !== run || run.ac.signal.aborted) return;
    console.error('<clinic-availability>:', error.message);
    this.#showProblem(run, error.shown ?? (error.final ? TEXT.broken : TEXT.failed));
    if (error.final) return;
    clearTimeout(run.retry);
    run.retry = setTimeout(again, backoff(run.tries++));
  }

  #showProblem(run, shown) {
    run.problem = shown;
    this.#render(run);
  }

  #render(run) {
    if (this.#run !== run) return;
    const now = Date.now();
    for (const [id, slot] of run.rows) if (Date.parse(slot.startAt) <= now) run.rows.delete(id);
    // The order of findSlots: start, then doctor, then slot.
    const all = [...run.rows.values()].sort(
      (a, b) => Date.parse(a.startAt) - Date.parse(b.startAt) || a.doctor.id - b.doctor.id || a.id - b.id,
    );
    const locale = attr(this, 'locale') || document.documentElement.lang || navigator.language;
    const meta = run.meta;
    const el = this.#el;
    el.name.textContent = meta?.title ?? '';
    el.day.textContent = meta ? (meta.when ?? longDay(locale, meta.date)) : '';
    const zoneShown = !!meta?.zone && !here(meta.zone);
    el.zone.hidden = !zoneShown;
    el.zone.textContent = zoneShown ? TEXT.zone(meta.zone, offsetOn(meta.zone, meta.date)) : '';
    if (run.ready) {
      if (run.shown) this.#announce(run, all, locale);
      run.shown = new Map(all.map((s) => [s.id, s]));
      for (const s of all) run.ever.add(s.id);
    }
    const max = Number(attr(this, 'max') ?? 20);
    this.#draw(all.slice(0, Number.isInteger(max) && max > 0 ? max : 20), locale, zoneShown, !!run.source?.wide);
    el.status.textContent = run.problem ?? (!run.ready ? TEXT.loading : all.length ? '' : (meta?.none ?? TEXT.none));
    // A slot stops being bookable when it starts.
    clearTimeout(run.prune);
    if (all.length) run.prune = setTimeout(() => this.#render(run), Math.min(Date.parse(all[0].startAt) - now + 50, 2 ** 31 - 1));
  }

  #announce(run, all, locale) {
    const said = [];
    const now = new Map(all.map((s) => [s.id, s]));
    // Across days and doctors a time alone would not say which.
    const name = run.source.wide ? (s) => `${dayOf(locale, s.doctor.timezone, s.startAt)} ${timeOf(locale, s)}, ${s.doctor.name}` : (s) => timeOf(locale, s);
    for (const [id, s] of run.shown) if (!now.has(id)) said.push(TEXT.gone(name(s)));
    for (const s of all) {
      if (!run.shown.has(s.id)) said.push((run.ever.has(s.id) ? TEXT.back : TEXT.fresh)(name(s)));
    }
    if (!said.length) return;
    const line = document.createElement('p');
    line.textContent = `${said.join('. ')}.`;
    this.#el.live.append(line);
    while (this.#el.live.childElementCount > 3) this.#el.live.firstElementChild.remove();
  }

  /** Brings the list to `slots`, moving no button that stays (a focused one keeps focus). */
  #draw(slots, locale, zoneShown, wide) {
    const list = this.#el.list;
    const keep = new Set(slots.map((s) => s.id));
    const active = this.#root.activeElement;
    const lost = active?.dataset.slot && !keep.has(active.dataset.slot) ? active : null;
    for (const [id, item] of this.#items) {
      if (!keep.has(id)) {
        item.remove();
        this.#items.delete(id);
      }
    }
    let at = list.firstElementChild;
    for (const slot of slots) {
      let item = this.#items.get(slot.id);
      if (!item) {
        item = document.createElement('li');
        const button = item.appendChild(document.createElement('button'));
        button.type = 'button';
        button.setAttribute('part', 'slot');
        button.dataset.slot = slot.id;
        this.#items.set(slot.id, item);
      }
      label(item.firstChild, slot, locale, wide ? !here(slot.doctor.timezone) : zoneShown, wide);
      if (item === at) at = at.nextElementSibling;
      else list.insertBefore(item, at);
    }
    list.hidden = !slots.length;
    if (lost) {
      // Keyboard users stay in the list: the next time, else the last, else the title.
      const next = slots.find((s) => Date.parse(s.startAt) >= Date.parse(lost.dataset.start)) ?? slots.at(-1);
      (next ? this.#items.get(next.id).firstChild : this.#el.title).focus();
    }
  }

  #arrow(e) {
    const buttons = [...this.#el.list.querySelectorAll('button')];
    const i = buttons.indexOf(this.#root.activeElement);
    const to = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: buttons.length - 1 }[e.key];
    if (i < 0 || to == null) return;
    e.preventDefault();
    buttons[Math.max(0, Math.min(buttons.length - 1, to))].focus();
  }

  #choose(id) {
    const slot = this.#run?.rows.get(id);
    if (!slot) return;
    const detail = { slotId: slot.id, doctorId: slot.doctor.id, startAt: slot.startAt, endAt: slot.endAt };
    const proceed = this.dispatchEvent(new CustomEvent('slot-select', { bubbles: true, composed: true, cancelable: true, detail }));
    const template = attr(this, 'booking-url');
    if (!proceed || !template) return;
    let url;
    try {
      url = new URL(template.replaceAll('{slot}', encodeURIComponent(slot.id)), document.baseURI);
    } catch {
      url = null;
    }
    // Only web pages: a `javascript:` URL in an attribute would run on the host page.
    if (url && /^https?:$/.test(url.protocol)) location.assign(url.href);
    else console.error(`<clinic-availability>: booking-url="${template}" is not an http(s) URL`);
  }
}

/**
 * Fills a slot's button: the time shows (with its day, doctor and zone when `wide`, across
 * days and doctors); the day, zone, doctor and seats complete its name, which always holds
 * the visible words, as voice control needs.
 */
function label(button, slot, locale, zoneShown, wide) {
  const zone = slot.doctor.timezone;
  const zoneText = zoneShown ? TEXT.zoneShort(zone) : '';
  const parts = wide
    ? [
        [dayShownOf(locale, zone, slot.startAt), 'day'],
        [', ', 'sr'],
        [timeOf(locale, slot), 'time'],
        [zoneText, zoneShown ? 'tz' : 'sr'],
        [', ', 'sr'],
        [slot.doctor.name, 'doc'],
        [', ', 'sr'],
        [TEXT.seats(slot.available), slot.capacity > 1 ? 'seats' : 'sr'],
      ]
    : [
        [`${dayOf(locale, zone, slot.startAt)}, `, 'sr'],
        [timeOf(locale, slot), 'time'],
        [`${zoneText}, ${slot.doctor.name}, `, 'sr'],
        [TEXT.seats(slot.available), slot.capacity > 1 ? 'seats' : 'sr'],
      ];
  const key = JSON.stringify(parts);
  if (button.dataset.key === key) return;
  button.dataset.key = key;
  button.dataset.start = slot.startAt;
  button.replaceChildren(
    ...parts.map(([text, kind]) => {
      const span = document.createElement('span');
      span.className = kind;
      span.textContent = text;
      return span;
    }),
  );
}

/** `Intl.DateTimeFormat`s by locale and options: made once each, since making one is slow. */
const formats = new Map();
function format(locale, options) {
  const key = `${locale}|${JSON.stringify(options)}`;
  let made = formats.get(key);
  if (!made) {
    try {
      made = new Intl.DateTimeFormat(locale, options);
    } catch {
      made = new Intl.DateTimeFormat(undefined, options); // a malformed locale
    }
    formats.set(key, made);
  }
  return made;
}

const timeOf = (locale, slot) =>
  format(locale, { hour: 'numeric', minute: '2-digit', timeZone: slot.doctor.timezone }).format(new Date(slot.startAt));
const dayOf = (locale, zone, at) =>
  format(locale, { weekday: 'long', day: 'numeric', month: 'long', year: 'numeric', timeZone: zone }).format(new Date(at));
const dayShownOf = (locale, zone, at) =>
  format(locale, { weekday: 'long', day: 'numeric', month: 'long', timeZone: zone }).format(new Date(at));
/** True when `zone` is the browser's own. */
const here = (zone) => canonicalZone(zone) === Intl.DateTimeFormat().resolvedOptions().timeZone;
/** A `YYYY-MM-DD` day, named in the locale (the calendar day itself, whatever the zone). */
const longDay = (locale, date) => dayOf(locale, 'UTC', `${date}T12:00:00Z`);
const canonicalZone = (zone) => format('en', { timeZone: zone }).resolvedOptions().timeZone;

/** The zone's offset on that day, e.g. "GMT+2". */
function offsetOn(zone, date) {
  const parts = format('en', { timeZone: zone, timeZoneName: 'shortOffset' }).formatToParts(new Date(`${date}T12:00:00Z`));
  return parts.find((p) => p.type === 'timeZoneName')?.value ?? zone;
}

/** Today in the zone, `YYYY-MM-DD`. */
const today = (zone) => dayIn(zone, new Date());

/** The day of `at` in the zone, `YYYY-MM-DD`. */
function dayIn(zone, at) {
  const parts = format('en', { timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit' }).formatToParts(new Date(at));
  const part = (type) => parts.find((p) => p.type === type).value;
  return `${part('year')}-${part('month')}-${part('day')}`;
}

const offerable = (s) => s.available > 0 && !s.closed && Date.parse(s.startAt) > Date.now();

/** The wait before retry number `tries` (from 0): 0.5 s doubling to 30 s, each drawn in its upper half. */
function backoff(tries) {
  const base = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** tries);
  return base / 2 + (Math.random() * base) / 2;
}

/** The service's root from an `endpoint` attribute (default: where this module came from). */
function serviceRoot(value) {
  const url = new URL(value ?? SERVICE, document.baseURI);
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  url.search = '';
  url.hash = '';
  return url;
}

/** A trimmed attribute, `null` when absent or blank. */
function attr(el, name) {
  const value = el.getAttribute(name)?.trim();
  return value ? value : null;
}

if (!customElements.get('clinic-availability')) customElements.define('clinic-availability', ClinicAvailability);
