// Drives the GraphiQL page of a running clinic-booking server in headless Chromium with the
// network off: every request that is not to the server is aborted, and any attempt fails the run.
//
//   node tests/browser/graphiql.mjs <server url> <doctor id> <date> <patient token>
//
// The doctor must have one slot (free) on that date. Checks, in order: the page loads and
// GraphiQL's editor appears; a query set in the editor runs and shows the doctor; a
// slotAvailability subscription shows its snapshot event, then, after this script books the
// slot through the API as the patient, the event of that booking. Run by tests/api/browser.rs;
// needs /usr/bin/chromium (or CHROMIUM=path) and `npm ci` in tests/browser. SCREENSHOT=file.png
// keeps a picture of the page at the end.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { chromium } from 'playwright-core';

const [base, doctorId, date, token] = process.argv.slice(2);
if (!base || !doctorId || !date || !token) {
  console.error('usage: node graphiql.mjs <server url> <doctor id> <date> <patient token>');
  process.exit(2);
}
const server = new URL(base);
const STEP_TIMEOUT = 30_000;

const step = (what) => console.log(`ok: ${what}`);
const foreign = [];
const problems = [];

// The whole run is bounded, whatever hangs.
const deadline = setTimeout(() => {
  console.error('FAILED: the run took longer than 3 minutes');
  process.exit(1);
}, 180_000);

const userDataDir = await mkdtemp(join(tmpdir(), 'clinic-booking-chromium-'));
let context;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--headless',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      // No name resolves: nothing but the server's address literal can be reached.
      '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',
    ],
  });
  await context.route('**/*', (route) => {
    const url = new URL(route.request().url());
    if (url.host === server.host) return route.continue();
    foreign.push(url.href);
    return route.abort('blockedbyclient');
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(STEP_TIMEOUT);
  const sockets = [];
  page.on('websocket', (ws) => {
    sockets.push(ws.url());
    if (new URL(ws.url()).host !== server.host) foreign.push(ws.url());
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console error: ${m.text()}`);
  });
  // A resource the page's Content-Security-Policy refuses would make part of GraphiQL fail.
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) =>
      console.error(`CSP refused ${e.blockedURI || '(inline)'} (${e.violatedDirective})`),
    );
  });

  // 1. The page, served by the server itself, with everything it needs.
  const response = await page.goto(new URL('/graphql', server).href);
  if (response?.status() !== 200) throw new Error(`GET /graphql answered ${response?.status()}`);
  await page.locator('.graphiql-query-editor .CodeMirror').waitFor({ state: 'visible' });
  await page.locator('.graphiql-execute-button').waitFor({ state: 'visible' });
  if ((await page.title()) !== 'clinic-booking') throw new Error(`title: ${await page.title()}`);
  step('the page loads and GraphiQL shows its editor');

  // Sets the editor's text, then waits until GraphiQL has parsed it (it does so shortly after
  // a change, and tells a subscription from a query by that parse when running it).
  const setQuery = async (query, kind) => {
    await page.evaluate((q) => document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror.setValue(q), query);
    await page.waitForFunction(
      (k) => document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror.operations?.[0]?.operation === k,
      kind,
    );
  };
  const result = () =>
    page.evaluate(() => document.querySelector('.graphiql-response .CodeMirror')?.CodeMirror.getValue() ?? '');
  // Waits until the result pane holds JSON for which `accept` is true; returns it.
  const awaitResult = async (what, accept) => {
    const started = Date.now();
    let last = '';
    while (Date.now() - started < STEP_TIMEOUT) {
      last = await result();
      try {
        const json = JSON.parse(last);
        if (accept(json)) return json;
      } catch {
        // Not (yet) JSON.
      }
      await page.waitForTimeout(100);
    }
    throw new Error(`${what}: the result pane shows ${JSON.stringify(last)}`);
  };

  // 2. A query, set in the editor and run with the execute button.
  await setQuery('{ doctors(first: 5) { nodes { id name } } }', 'query');
  await page.locator('.graphiql-execute-button').click();
  await awaitResult('query', (r) => r.data?.doctors?.nodes?.some((d) => d.id === doctorId));
  step('a query set in the editor runs and its result shows');

  // 3. A subscription: the snapshot first, then the event of a booking made meanwhile.
  const subscription = `subscription {
  slotAvailability(doctorId: "${doctorId}", date: "${date}") { slotId bookedCount available version }
}`;
  await setQuery(subscription, 'subscription');
  await page.locator('.graphiql-execute-button').click();
  const snapshot = await awaitResult('snapshot event', (r) => r.data?.slotAvailability?.version === 0);
  const slotId = snapshot.data.slotAvailability.slotId;
  if (!sockets.some((u) => new URL(u).pathname === '/graphql/ws')) throw new Error(`no WebSocket to /graphql/ws: ${sockets}`);
  step(`a slotAvailability subscription shows the snapshot event (slot ${slotId})`);

  const booking = await fetch(new URL('/graphql', server), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({
      query: 'mutation($s: ID!) { bookAppointment(input: { slotId: $s, idempotencyKey: "browser-test" }) { appointment { id } userErrors { code } } }',
      variables: { s: slotId },
    }),
  });
  const booked = await booking.json();
  if (!booked.data?.bookAppointment?.appointment) throw new Error(`booking failed: ${JSON.stringify(booked)}`);
  await awaitResult('booking event', (r) => r.data?.slotAvailability?.bookedCount === 1 && r.data.slotAvailability.version === 1);
  step('the booking made through the API arrives as the next event');
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT });
} catch (e) {
  problems.push(`FAILED: ${e.message}`);
} finally {
  await context?.close().catch(() => {});
  await rm(userDataDir, { recursive: true, force: true }).catch(() => {});
  clearTimeout(deadline);
}

if (foreign.length > 0) problems.push(`requests to other hosts (the network is off): ${[...new Set(foreign)].join(', ')}`);
if (problems.length > 0) {
  for (const p of problems) console.error(p);
  process.exit(1);
}
console.log('ok: nothing but the server was asked for anything');
