// Drives <clinic-availability> in headless Chromium on pages of another origin than the service,
// with the network off (names resolve to nothing but the pages' own two). Run by
// tests/api/widget.rs, which talks with it over the standard streams:
//
//   1. it prints `host <port>`: its HTTP server on 127.0.0.1 serving the host pages, which
//      Chromium reaches as http://clinic-host.test:<port> (the service allows this origin) and
//      http://clinic-evil.test:<port> (it does not);
//   2. it reads one JSON line: the service's instances (`a`, and `b` when the run has Redis),
//      two doctors with their day's slots, patient tokens, and where to keep a screenshot;
//   3. it prints `ok: …` per check passed and `@@ <request>` (stop-redis, start-redis, stop-a,
//      start-a) when the test must act, then waits for `done`.
//
// Exits 0 when every check passed. Checks, in order: the widget renders a doctor's day (today
// in the doctor's zone, named since it is not the browser's) with full accessible names; a
// booking and a cancel made through the API show within one second, also for runs
// (duration-minutes); a booking through a second instance shows; after a Redis restart the
// changes made meanwhile show; after its own instance restarts it reconnects, re-reads and is
// live again; a specialty's earliest times across doctors, live; keyboard use and slot-select
// (with booking-url, and cancelled); no axe-core
// violation; a hostile host stylesheet changes nothing; a refused origin cannot load the
// module; the empty, unknown-doctor and failed-read states; the /widget page.
import http from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import readline from 'node:readline';

import { chromium } from 'playwright-core';

const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
/** The contract's bound: a change shows within one second of its commit. */
const LIVE_MS = 1000;
/** After an outage the widget must catch up; how fast is not the point there. */
const CATCH_UP_MS = 30_000;
const STEP_TIMEOUT = 30_000;

const problems = [];
const foreign = [];
const step = (what) => console.log(`ok: ${what}`);

const deadline = setTimeout(() => {
  console.error('FAILED: the run took longer than 3 minutes');
  process.exit(1);
}, 180_000);

const input = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function readLine() {
  const { value, done } = await input.next();
  if (done) throw new Error('the test closed its end');
  return value;
}
/** Asks the Rust test to act, and waits until it has. */
async function ask(request) {
  console.log(`@@ ${request}`);
  const answer = await readLine();
  if (answer !== 'done') throw new Error(`${request}: answered ${answer}`);
}

// The host pages, by path.
const pages = new Map();
const server = http.createServer((req, res) => {
  const path = new URL(req.url, 'http://host').pathname;
  const html = pages.get(path) ?? (path.startsWith('/book/') ? hostPage('Book', '<p>The booking page.</p>', { widget: false }) : null);
  res.writeHead(html ? 200 : 404, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(html ?? 'not found');
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const port = server.address().port;
// A port nothing listens on, for a widget whose reads fail.
const closed = await new Promise((resolve) => {
  const probe = http.createServer().listen(0, '127.0.0.1', () => {
    const { port: free } = probe.address();
    probe.close(() => resolve(free));
  });
});
console.log(`host ${port}`);

const setup = JSON.parse(await readLine());
const HOST = `http://clinic-host.test:${port}`;
const EVIL = `http://clinic-evil.test:${port}`;
const MODULE = `${setup.a}/widget/clinic-availability.js`;
const L = setup.live; // four slots of capacity 1, today 19:00–20:00 in a zone not the browser's
const O = setup.other; // four slots of capacity 2, tomorrow 19:00–20:00 UTC (the browser's zone)
const token = (i) => setup.tokens[i];

function hostPage(title, body, { css = '', widget = true, head = '' } = {}) {
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>${title}</title><link rel="icon" href="data:,">${css ? `<style>${css}</style>` : ''}
${widget ? `<script type="module" src="${MODULE}" onerror="window.widgetFailed = true"></script>` : ''}${head}
</head><body><main><h1>${title}</h1>${body}</main></body></html>`;
}

// Reports every slot-select that reaches the document; `#prevent` cancels the first one.
const LISTENER = `<script>
  let prevent = location.hash === '#prevent';
  document.addEventListener('slot-select', (e) => {
    const { bubbles, composed, cancelable, detail } = e;
    window.reportSelect({ bubbles, composed, cancelable, detail, from: e.target.id });
    if (prevent) { e.preventDefault(); prevent = false; }
  });
</script>`;
const HOSTILE = `* { font-family: "Comic Sans MS", cursive !important; color: red !important; background: yellow !important;
  letter-spacing: 3px !important; text-transform: uppercase !important; line-height: 3 !important; font-size: 30px !important; }
button { display: none !important; } p { display: none !important; }
ul, li { list-style: square !important; padding: 40px !important; margin: 40px !important; }`;
const other = `<clinic-availability id="w" doctor-id="${O.id}" date="${O.date}" max="3" locale="en-GB" booking-url="/book/{slot}"></clinic-availability>`;

pages.set(
  '/live',
  hostPage(
    'Live availability',
    `<clinic-availability id="plain" doctor-id="${L.id}" locale="en-GB"></clinic-availability>
     <clinic-availability id="runs" doctor-id="${L.id}" duration-minutes="30" locale="en-GB"></clinic-availability>`,
  ),
);
pages.set('/keyboard', hostPage('Choose a time', other, { head: LISTENER }));
// Both doctors are of the specialty "general": named here in another case.
pages.set('/specialty', hostPage('The first free times', '<clinic-availability id="spec" specialty="General" days="3" locale="en-GB"></clinic-availability>'));
pages.set('/styled', hostPage('Choose a time', other, { css: HOSTILE, head: LISTENER }));
pages.set(
  '/states',
  hostPage(
    'States',
    `<clinic-availability id="none" locale="en-GB"></clinic-availability>
     <clinic-availability id="unknown" doctor-id="987654321" locale="en-GB"></clinic-availability>
     <clinic-availability id="down" doctor-id="${O.id}" date="${O.date}" endpoint="http://127.0.0.1:${closed}" locale="en-GB"></clinic-availability>`,
  ),
);
pages.set('/refused', hostPage('Another site', `<clinic-availability id="w" doctor-id="${O.id}"></clinic-availability>`));
pages.set(
  '/shot',
  `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Widget</title><link rel="icon" href="data:,">
<script type="module" src="${MODULE}"></script>
<style>body { margin: 0; padding: 16px; background: #eef1f4; } #themed { margin-top: 12px; --clinic-accent: #0a6b47; }</style></head>
<body><clinic-availability id="w" doctor-id="${O.id}" date="${O.date}" locale="en-GB"></clinic-availability>
<clinic-availability id="themed" doctor-id="${L.id}" locale="en-GB"></clinic-availability></body></html>`,
);

async function gql(base, bearer, query, variables) {
  const response = await fetch(`${base}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(bearer ? { authorization: `Bearer ${bearer}` } : {}) },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(`${query}: ${JSON.stringify(body.errors)}`);
  return body.data;
}
async function book(base, bearer, slotId, key) {
  const data = await gql(
    base,
    bearer,
    'mutation($s:ID!,$k:String!){bookAppointment(input:{slotId:$s,idempotencyKey:$k}){appointment{id} userErrors{code}}}',
    { s: slotId, k: key },
  );
  const made = data.bookAppointment.appointment;
  if (!made) throw new Error(`booking ${slotId} refused: ${JSON.stringify(data)}`);
  return made.id;
}
async function cancel(base, bearer, id) {
  const data = await gql(base, bearer, 'mutation($id:ID!){cancelAppointment(id:$id){cancelled userErrors{code}}}', { id });
  if (!data.cancelAppointment.cancelled) throw new Error(`cancelling ${id}: ${JSON.stringify(data)}`);
}

/** The slot ids a widget (by CSS selector) shows, in order. */
const shown = (page, selector) =>
  page.evaluate(
    (sel) => [...(document.querySelector(sel)?.shadowRoot?.querySelectorAll('button[part="slot"]') ?? [])].map((b) => b.dataset.slot),
    selector,
  );

/** Waits until the widget shows exactly `ids`, for at most `timeout` ms. */
async function expectSlots(page, selector, ids, timeout, what) {
  try {
    await page.waitForFunction(
      ([sel, want]) => {
        const buttons = document.querySelector(sel)?.shadowRoot?.querySelectorAll('button[part="slot"]') ?? [];
        return [...buttons].map((b) => b.dataset.slot).join() === want.join();
      },
      [selector, ids],
      { timeout: Math.max(1, timeout), polling: 25 },
    );
  } catch {
    const got = await shown(page, selector);
    throw new Error(`${what}: expected slots [${ids}] within ${Math.round(timeout)} ms; the widget shows [${got}]`);
  }
}

/**
 * What is left of `ms` since `since`. The clock of a live change starts when the mutation's
 * answer arrives: its commit came before, and this is the latest it can have been. (Starting
 * before the request would also count the server's work before the commit, which the
 * contract's "within one second of the commit" does not.)
 */
const within = (ms, since) => ms - (performance.now() - since);

async function until(what, timeout, check) {
  const end = performance.now() + timeout;
  while (!check()) {
    if (performance.now() > end) throw new Error(`${what}: not within ${timeout} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Records a page's console errors, uncaught errors and WebSockets (with the `next` messages each got). */
function watch(page, name) {
  const log = { errors: [], sockets: [] };
  page.on('console', (m) => m.type() === 'error' && log.errors.push(m.text()));
  page.on('pageerror', (e) => problems.push(`${name}: uncaught ${e.message}`));
  page.on('websocket', (ws) => {
    const socket = { url: ws.url(), nexts: 0, closed: false };
    log.sockets.push(socket);
    ws.on('framereceived', (f) => {
      try {
        if (JSON.parse(f.payload).type === 'next') socket.nexts++;
      } catch {
        // Not JSON: not ours to count.
      }
    });
    ws.on('close', () => (socket.closed = true));
  });
  page.setDefaultTimeout(STEP_TIMEOUT);
  return log;
}
/** Sockets from `from` on that are open and have had their subscription's first message. */
const liveSockets = (log, from = 0) => log.sockets.slice(from).filter((s) => s.nexts > 0 && !s.closed).length;

/** The accessible names of a widget's slot buttons, as Chromium's accessibility tree has them. */
async function slotNames(page, selector) {
  const tree = await page.locator(selector).ariaSnapshot();
  return [...tree.matchAll(/- button "((?:[^"\\]|\\.)*)"/g)].map((m) => JSON.parse(`"${m[1]}"`));
}

const liveText = (page, selector) => page.locator(`${selector} [aria-live]`).textContent();

/** Runs axe-core (see addInitScript) on the whole page; fails on any violation, or if the widget's shadow tree went unchecked. */
async function axe(page, what) {
  const result = await page.evaluate(async () => {
    const r = await window.axe.run(document);
    return {
      violations: r.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => JSON.stringify(n.target)).join(', ')})`),
      // A node inside a shadow root is named by a list of selectors, host first.
      shadow: r.passes.some((p) => p.nodes.some((n) => Array.isArray(n.target[0]))),
    };
  });
  if (result.violations.length) throw new Error(`axe-core on ${what}: ${result.violations.join('; ')}`);
  if (!result.shadow) throw new Error(`axe-core on ${what} did not check the widget's shadow tree`);
  step(`axe-core finds no violation on ${what}`);
}

const userDataDir = await mkdtemp(join(tmpdir(), 'clinic-widget-chromium-'));
let context;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    timezoneId: 'UTC',
    locale: 'en-GB',
    viewport: { width: 800, height: 600 },
    args: [
      '--no-sandbox',
      '--headless',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      // The host pages' two names lead to this script's server; nothing else resolves.
      '--host-resolver-rules=MAP clinic-host.test 127.0.0.1, MAP clinic-evil.test 127.0.0.1, MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',
    ],
  });
  // axe-core in every page, put there by the browser itself: a page's Content-Security-Policy
  // (the /widget page has one) does not apply to it.
  await context.addInitScript({ path: AXE });
  const reachable = new Set([setup.a, setup.b, HOST, EVIL, `http://127.0.0.1:${closed}`].filter(Boolean).map((u) => new URL(u).host));
  context.on('request', (r) => {
    const url = new URL(r.url());
    if (url.protocol.startsWith('http') && !reachable.has(url.host)) foreign.push(url.href);
  });

  // 1. The widget on a page of another origin: today in the doctor's zone, the zone named.
  const live = context.pages()[0] ?? (await context.newPage());
  const liveLog = watch(live, 'the live page');
  await live.goto(`${HOST}/live`);
  await expectSlots(live, '#plain', L.slots, STEP_TIMEOUT, 'the doctor’s day');
  await expectSlots(live, '#runs', L.slots.slice(0, 3), STEP_TIMEOUT, 'starts of 30-minute runs');
  const weekday = new Date(`${L.date}T12:00:00Z`).toLocaleDateString('en-GB', { weekday: 'long', timeZone: 'UTC' });
  const names = await slotNames(live, '#plain');
  const wanted = ['19:00', '19:15', '19:30', '19:45'];
  names.forEach((name, i) => {
    for (const part of [weekday, wanted[i], L.zone, L.name, '1 seat left']) {
      if (!name.includes(part)) throw new Error(`slot ${i}: accessible name ${JSON.stringify(name)} lacks ${part}`);
    }
  });
  if (names.length !== 4) throw new Error(`accessible names: ${JSON.stringify(names)}`);
  const zoneLine = await live.locator('#plain [part="zone"]').textContent();
  if (!(await live.locator('#plain [part="zone"]').isVisible()) || !zoneLine.includes(L.zone)) throw new Error(`zone line: ${zoneLine}`);
  step(`the widget on ${HOST} shows ${L.name}'s day in ${L.zone}, named, with full accessible names`);

  // 2. A booking and a cancel through the API, each within a second of its commit.
  await until('both subscriptions live', STEP_TIMEOUT, () => liveSockets(liveLog) >= 2);
  const first = await book(setup.a, token(0), L.slots[1], 'widget-1');
  let t0 = performance.now();
  await expectSlots(live, '#plain', [L.slots[0], L.slots[2], L.slots[3]], within(LIVE_MS, t0), 'a booking');
  await expectSlots(live, '#runs', [L.slots[2]], within(LIVE_MS, t0), 'a booking, for 30-minute runs');
  if (!(await liveText(live, '#plain')).includes('19:15 is no longer available')) throw new Error(`announced: ${await liveText(live, '#plain')}`);
  await cancel(setup.a, token(0), first);
  t0 = performance.now();
  await expectSlots(live, '#plain', L.slots, within(LIVE_MS, t0), 'a cancel');
  await expectSlots(live, '#runs', L.slots.slice(0, 3), within(LIVE_MS, t0), 'a cancel, for 30-minute runs');
  if (!(await liveText(live, '#plain')).includes('19:15 is available again')) throw new Error(`announced: ${await liveText(live, '#plain')}`);
  step('a booking and its cancel show within one second each, and are announced');
  await axe(live, 'the live page after announcements');

  // 3. A booking taken by another instance (through Redis). SQLite runs have neither.
  let onB = null;
  if (setup.b) {
    onB = await book(setup.b, token(1), L.slots[2], 'widget-2');
    t0 = performance.now();
    await expectSlots(live, '#plain', [L.slots[0], L.slots[1], L.slots[3]], within(LIVE_MS, t0), 'a booking on instance B');
    step('a booking taken by a second instance shows within one second');
  } else {
    step('skipped on SQLite: a second instance (it needs Redis)');
  }

  // 4. Redis restarts: what changed while it was down, and right after, shows.
  if (setup.redis) {
    await ask('stop-redis');
    const whileDown = await book(setup.a, token(2), L.slots[3], 'widget-3');
    await ask('start-redis');
    await expectSlots(live, '#plain', [L.slots[0], L.slots[1]], CATCH_UP_MS, 'a booking made while Redis was down');
    await cancel(setup.a, token(1), onB);
    await expectSlots(live, '#plain', [L.slots[0], L.slots[1], L.slots[2]], CATCH_UP_MS, 'a cancel right after Redis came back');
    if (!whileDown) throw new Error('no booking while Redis was down');
    step('after a Redis restart the widget shows the changes made meanwhile');
  } else {
    step('skipped on SQLite: the Redis restart');
  }

  // 5. Its own instance restarts: the widget reconnects with backoff, reads the list again, and
  //    is live on the new connection. (Errors in the console from here on are the outage's.)
  const expectedErrors = liveLog.errors.length;
  const socketsBefore = liveLog.sockets.length;
  const left = setup.redis ? [L.slots[1], L.slots[2]] : [L.slots[1], L.slots[2], L.slots[3]];
  let meanwhile;
  await ask('stop-a');
  if (setup.b) meanwhile = await book(setup.b, token(3), L.slots[0], 'widget-4'); // unheard: A is down
  await ask('start-a');
  if (!setup.b) meanwhile = await book(setup.a, token(3), L.slots[0], 'widget-4');
  await expectSlots(live, '#plain', left, CATCH_UP_MS, 'after its instance came back');
  await until('both subscriptions live again', CATCH_UP_MS, () => liveSockets(liveLog, socketsBefore) >= 2);
  await cancel(setup.a, token(3), meanwhile);
  t0 = performance.now();
  await expectSlots(live, '#plain', [L.slots[0], ...left], within(LIVE_MS, t0), 'a cancel on the new connection');
  step('after its instance restarted the widget reconnected, re-read the list and is live again');
  for (const e of liveLog.errors.slice(0, expectedErrors)) problems.push(`the live page logged: ${e}`);
  await live.close();

  // 6a. A specialty's earliest free times across its doctors (findSlots), in order, each
  //     named with its doctor (and zone where it is not the browser's), live as well.
  const spec = await context.newPage();
  const specLog = watch(spec, 'the specialty page');
  await spec.goto(`${HOST}/specialty`);
  const free = [L.slots[0], ...left, ...O.slots];
  await expectSlots(spec, '#spec', free, STEP_TIMEOUT, 'a specialty’s earliest times');
  const specNames = await slotNames(spec, '#spec');
  if (!(specNames[0].includes(L.name) && specNames[0].includes(L.zone) && specNames[0].includes(weekday))) {
    throw new Error(`the first slot's accessible name: ${JSON.stringify(specNames[0])}`);
  }
  if (!(specNames.at(-1).includes(O.name) && specNames.at(-1).includes('2 seats left') && !specNames.at(-1).includes('UTC'))) {
    throw new Error(`the last slot's accessible name: ${JSON.stringify(specNames.at(-1))}`);
  }
  await until('the specialty widget live', STEP_TIMEOUT, () => liveSockets(specLog) >= 1);
  const taken = await book(setup.a, token(4), L.slots[0], 'widget-5');
  t0 = performance.now();
  await expectSlots(spec, '#spec', free.slice(1), within(LIVE_MS, t0), 'a booking, across a specialty');
  await cancel(setup.a, token(4), taken);
  t0 = performance.now();
  await expectSlots(spec, '#spec', free, within(LIVE_MS, t0), 'a cancel, across a specialty');
  await axe(spec, 'a specialty’s widget');
  for (const e of specLog.errors) problems.push(`the specialty page logged: ${e}`);
  step('a specialty shows its doctors’ earliest times in order, and a booking and its cancel within one second each');
  await spec.close();

  // 6. Keyboard: Tab to a slot, arrows between slots, Enter; slot-select, then booking-url.
  const { slots: otherSlots } = (await gql(setup.a, null, `{doctor(id:"${O.id}"){slots(date:"${O.date}"){id startAt endAt}}}`)).doctor;
  const detailOf = (i) => ({ slotId: O.slots[i], doctorId: O.id, startAt: otherSlots[i].startAt, endAt: otherSlots[i].endAt });
  const kb = await context.newPage();
  const kbLog = watch(kb, 'the keyboard page');
  const selected = [];
  await kb.exposeFunction('reportSelect', (e) => selected.push(e));
  const requested = [];
  kb.on('request', (r) => requested.push(new URL(r.url()).pathname));
  await kb.goto(`${HOST}/keyboard`);
  await expectSlots(kb, '#w', O.slots.slice(0, 3), STEP_TIMEOUT, 'max="3" of four slots');
  const otherNames = await slotNames(kb, '#w');
  if (!otherNames.every((n) => n.includes('2 seats left') && n.includes(O.name) && !n.includes('UTC'))) {
    throw new Error(`names in the browser's own zone: ${JSON.stringify(otherNames)}`);
  }
  if (await kb.locator('#w [part="zone"]').isVisible()) throw new Error('the zone is named although it is the browser’s');
  const look = (page) =>
    page.locator('#w').evaluate((el) => {
      const props = ['display', 'visibility', 'fontFamily', 'fontSize', 'fontWeight', 'color', 'backgroundColor', 'letterSpacing',
        'textTransform', 'lineHeight', 'padding', 'margin', 'borderTopColor', 'borderTopLeftRadius', 'listStyleType'];
      const of = (node) => {
        const style = getComputedStyle(node);
        const box = node.getBoundingClientRect();
        return [...props.map((p) => style[p]), Math.round(box.width), Math.round(box.height)];
      };
      const root = el.shadowRoot;
      return ['.w', '.name', '#day', 'ul', 'li', 'button', 'button .time'].map((sel) => [sel, of(root.querySelector(sel))]);
    });
  const plainLook = await look(kb);
  const focused = () => kb.evaluate(() => document.activeElement?.shadowRoot?.activeElement?.dataset.slot ?? null);
  await kb.keyboard.press('Tab');
  if ((await focused()) !== O.slots[0]) throw new Error(`Tab focused ${await focused()}`);
  const outline = await kb.evaluate(() => getComputedStyle(document.activeElement.shadowRoot.activeElement).outlineStyle);
  if (outline !== 'solid') throw new Error(`the focused slot shows no focus ring (outline ${outline})`);
  await kb.keyboard.press('ArrowRight');
  await kb.keyboard.press('ArrowRight');
  await kb.keyboard.press('ArrowLeft');
  if ((await focused()) !== O.slots[1]) throw new Error(`the arrow keys moved focus to ${await focused()}`);
  await kb.keyboard.press('Enter');
  await kb.waitForURL(`${HOST}/book/${O.slots[1]}`);
  const event = JSON.stringify(selected[0]);
  if (event !== JSON.stringify({ bubbles: true, composed: true, cancelable: true, detail: detailOf(1), from: 'w' })) {
    throw new Error(`slot-select: ${event}`);
  }
  step('Tab reaches a slot (with a focus ring), arrows move, Enter sends slot-select and follows booking-url');
  await kb.goto(`${HOST}/keyboard#prevent`);
  await expectSlots(kb, '#w', O.slots.slice(0, 3), STEP_TIMEOUT, 'the page again');
  requested.length = 0;
  await kb.keyboard.press('Tab');
  await kb.keyboard.press(' ');
  await until('the cancelled slot-select', STEP_TIMEOUT, () => selected.length === 2);
  await kb.keyboard.press('ArrowRight');
  await kb.keyboard.press('Enter');
  await kb.waitForURL(`${HOST}/book/${O.slots[1]}`);
  if (JSON.stringify(selected[1].detail) !== JSON.stringify(detailOf(0))) throw new Error(`slot-select: ${JSON.stringify(selected[1])}`);
  if (requested.some((p) => p === `/book/${O.slots[0]}`)) throw new Error('a cancelled slot-select still navigated');
  step('Space sends slot-select too; preventDefault() keeps the page where it is');
  await kb.goto(`${HOST}/keyboard`);
  await expectSlots(kb, '#w', O.slots.slice(0, 3), STEP_TIMEOUT, 'the page again');
  await axe(kb, 'a host page with the widget');
  for (const e of kbLog.errors) problems.push(`the keyboard page logged: ${e}`);

  // 7. A hostile host stylesheet changes nothing inside the widget.
  const styled = await context.newPage();
  const styledLog = watch(styled, 'the styled page');
  await styled.exposeFunction('reportSelect', () => {});
  await styled.goto(`${HOST}/styled`);
  await expectSlots(styled, '#w', O.slots.slice(0, 3), STEP_TIMEOUT, 'under hostile CSS');
  const hostileLook = await look(styled);
  const differences = plainLook
    .map(([sel, values], i) => [sel, JSON.stringify(values), JSON.stringify(hostileLook[i][1])])
    .filter(([, plain, hostile]) => plain !== hostile);
  if (differences.length) {
    throw new Error(`the host's CSS changed ${differences.map(([sel, plain, hostile]) => `${sel}: ${plain} → ${hostile}`).join('; ')}`);
  }
  if (!(await styled.locator('#w button[part="slot"]').first().isVisible())) throw new Error('the slots are hidden');
  step('a hostile host stylesheet (fonts, colours, button { display: none }, …) leaves the widget as it was');
  for (const e of styledLog.errors) problems.push(`the styled page logged: ${e}`);
  await styled.close();
  await kb.close();

  // 8. A page of an origin the service does not allow cannot load the module.
  const evil = await context.newPage();
  watch(evil, 'the refused page');
  const refusal = evil.waitForEvent('console', { predicate: (m) => /blocked by CORS policy/.test(m.text()) });
  refusal.catch(() => {}); // awaited below; a failure before then is reported by that step
  await evil.goto(`${EVIL}/refused`);
  await evil.waitForFunction(() => window.widgetFailed === true);
  if (await evil.evaluate(() => !!customElements.get('clinic-availability'))) throw new Error('the element was defined on a refused origin');
  const why = await refusal;
  step(`a page of ${EVIL} is refused the module: “${why.text().slice(0, 90)}…”`);
  await evil.close();

  // 9. No doctor, an unknown doctor, a service that does not answer.
  const states = await context.newPage();
  const statesLog = watch(states, 'the states page');
  await states.goto(`${HOST}/states`);
  const statusOf = (id) => `document.querySelector('#${id}')?.shadowRoot?.querySelector('[part="status"]')?.textContent`;
  for (const [id, text] of [
    ['none', 'No doctor or specialty chosen for this calendar.'],
    ['unknown', 'No doctor with id 987654321.'],
    ['down', 'Free times could not be loaded. Trying again…'],
  ]) {
    await states.waitForFunction(`${statusOf(id)} === ${JSON.stringify(text)}`).catch(async () => {
      throw new Error(`#${id} says ${JSON.stringify(await states.evaluate(statusOf(id)))}, not ${JSON.stringify(text)}`);
    });
  }
  for (const reason of ['set doctor-id', 'there is no doctor with id 987654321', `POST http://127.0.0.1:${closed}/graphql failed`]) {
    await until(`the console explaining “${reason}”`, STEP_TIMEOUT, () => statesLog.errors.some((e) => e.includes(reason)));
  }
  await axe(states, 'the empty and failed states');
  step('no doctor, an unknown doctor and a failed read each say so, and log why');
  await states.close();

  // 10. The /widget page: pick a doctor, see it live, copy the snippet.
  const tool = await context.newPage();
  const toolLog = watch(tool, 'the /widget page');
  await tool.goto(`${setup.a}/widget`);
  await tool.locator(`#doctor option[value="${O.id}"]`).waitFor({ state: 'attached' });
  await tool.selectOption('#doctor', O.id);
  await tool.fill('#date', O.date);
  await expectSlots(tool, '#preview clinic-availability', O.slots, STEP_TIMEOUT, 'the preview');
  await until('the preview live', STEP_TIMEOUT, () => liveSockets(toolLog) >= 1);
  const snippet = await tool.inputValue('#snippet');
  const expected = `<script type="module" src="${MODULE}"></script>\n<clinic-availability doctor-id="${O.id}" date="${O.date}"></clinic-availability>`;
  if (snippet !== expected) throw new Error(`snippet: ${JSON.stringify(snippet)}`);
  await axe(tool, 'the /widget page');
  await tool.selectOption('#specialty', 'general');
  await expectSlots(tool, '#preview clinic-availability', free, STEP_TIMEOUT, 'the preview of a specialty');
  const bySpecialty = await tool.inputValue('#snippet');
  if (bySpecialty !== `<script type="module" src="${MODULE}"></script>\n<clinic-availability specialty="general" days="7"></clinic-availability>`) {
    throw new Error(`snippet for a specialty: ${JSON.stringify(bySpecialty)}`);
  }
  for (const e of toolLog.errors) problems.push(`the /widget page logged: ${e}`);
  step('/widget lists the doctors and specialties, shows the chosen one live and the snippet to paste');
  await tool.close();

  // 11. The picture for the README.
  if (setup.screenshot) {
    const shot = await context.newPage();
    await shot.setViewportSize({ width: 480, height: 360 });
    await shot.goto(`${HOST}/shot`);
    await expectSlots(shot, '#w', O.slots, STEP_TIMEOUT, 'the screenshot');
    await shot.waitForFunction(() => document.querySelector('#themed').shadowRoot.querySelector('button'));
    await shot.screenshot({ path: setup.screenshot });
    step(`screenshot kept in ${setup.screenshot}`);
  }
} catch (e) {
  problems.push(`FAILED: ${e.message}`);
} finally {
  await context?.close().catch(() => {});
  await rm(userDataDir, { recursive: true, force: true }).catch(() => {});
  server.close();
  clearTimeout(deadline);
}

if (foreign.length > 0) problems.push(`requests to other hosts (the network is off): ${[...new Set(foreign)].join(', ')}`);
if (problems.length > 0) {
  for (const p of problems) console.error(p);
  process.exit(1);
}
console.log('ok: nothing but the service and the host pages was asked for anything');
process.exit(0);
