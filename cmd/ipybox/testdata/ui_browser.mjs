// The browser side of TestUIBrowser (ui_browser_test.go): Debian's
// chromium driven by playwright-core. It reads one JSON command a line on
// stdin, does it on the page, and answers one JSON line on stdout
// ({"ok": true, ...} or {"ok": false, "error": ...}).
//
// Usage: node ui_browser.mjs NPM_DIR CHROMIUM BASE_URL SHOTS_DIR
import { createRequire } from 'node:module';
import readline from 'node:readline';
import path from 'node:path';

const [npmDir, chromiumPath, base, shots] = process.argv.slice(2);
const require = createRequire(path.join(npmDir, 'package.json'));
const { chromium } = require('playwright-core');

// Never let playwright fetch a browser: the system's chromium only.
const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'], headless: true });
const pages = {};

async function page(who) {
  if (!pages[who]) {
    const ctx = await browser.newContext({ acceptDownloads: true, viewport: { width: 1280, height: 900 } });
    pages[who] = await ctx.newPage();
  }
  return pages[who];
}

const commands = {
  // Opens another tab of who's browser, as the driver's page named as.
  async open({ who, as }) {
    const p = await page(who);
    pages[as] = await p.context().newPage();
    return {};
  },
  // Signs in, measuring nothing.
  async login({ who, token }) {
    const p = await page(who);
    await p.goto(base + '/ui/');
    await p.waitForSelector('#signin-form', { state: 'visible' });
    await p.fill('#token', token);
    await p.click('#signin-form button[type=submit]');
    await p.waitForSelector('#nav', { state: 'visible' });
    return {};
  },
  // Signs in anew in a tab whose browser is signed in already (its
  // stored token forgotten, as after clearing the site's storage).
  async resignin({ who, token }) {
    const p = await page(who);
    await p.goto(base + '/ui/');
    await p.evaluate(() => localStorage.removeItem('ipybox-csrf'));
    await p.reload();
    await p.waitForSelector('#signin-form', { state: 'visible' });
    await p.fill('#token', token);
    await p.click('#signin-form button[type=submit]');
    await p.waitForSelector('#nav', { state: 'visible' });
    return {};
  },
  // First view: the page's own mark (app.js), in ms since navigation
  // start, 5 times each: the sign-in form shown; then, signed in, the
  // session list. The browser has opened a page of this server before
  // (as a person's has), and the anchor is its loading of a static file
  // of the same server (the navigation's loadEventEnd), 5 times.
  async signin({ who, token }) {
    const p = await page(who);
    const mark = async () => {
      await p.waitForFunction(() => performance.getEntriesByName('ipybox-first-view').length > 0);
      return await p.evaluate(() => performance.getEntriesByName('ipybox-first-view')[0].startTime);
    };
    const anchor = [];
    for (let i = 0; i < 6; i++) {
      await p.goto(base + '/ui/static/app.css');
      await p.waitForFunction(() => performance.getEntriesByType('navigation')[0].loadEventEnd > 0);
      const t = await p.evaluate(() => performance.getEntriesByType('navigation')[0].loadEventEnd);
      if (i > 0) anchor.push(t); // the first warms the browser
    }
    const first = [];
    for (let i = 0; i < 5; i++) {
      await p.goto(base + '/ui/');
      await p.waitForSelector('#signin-form', { state: 'visible' });
      first.push(await mark());
    }
    await p.fill('#token', token);
    await p.click('#signin-form button[type=submit]');
    await p.waitForSelector('#nav', { state: 'visible' });
    const signed = [];
    for (let i = 0; i < 5; i++) {
      await p.reload();
      await p.waitForSelector('#nav', { state: 'visible' });
      signed.push(await mark());
    }
    return { first, signed, anchor };
  },
  // Loads the page (signed in) and returns, in ms since navigation start,
  // when its newest cells are shown (at least n), and how many.
  async cellsview({ who, n }) {
    const p = await page(who);
    await p.goto(base + '/ui/');
    try {
      await p.waitForFunction((n) => document.querySelectorAll('#cells > *').length >= n, n, { timeout: 60000 });
    } catch (e) {
      // Say what the page showed instead, for the failure's message.
      const shown = await p.evaluate(() => ({ url: location.href, cells: document.querySelectorAll('#cells > *').length, text: document.body.innerText.slice(0, 600) }));
      throw new Error(`${e.message}; the page showed ${JSON.stringify(shown)}`);
    }
    return { at: await p.evaluate(() => performance.now()), cells: await p.evaluate(() => document.querySelectorAll('#cells > *').length) };
  },
  // Clicks "Show older cells" and returns how long until more cells show,
  // and how many there are then.
  async older({ who }) {
    const p = await page(who);
    const before = await p.evaluate(() => document.querySelectorAll('#cells > *').length);
    const t0 = await p.evaluate(() => performance.now());
    await p.click('#older');
    await p.waitForFunction((b) => document.querySelectorAll('#cells > *').length > b, before, { timeout: 60000 });
    const t1 = await p.evaluate(() => performance.now());
    return { ms: t1 - t0, cells: await p.evaluate(() => document.querySelectorAll('#cells > *').length),
      images: await p.evaluate(() => document.querySelectorAll('#cells img.out-img').length) };
  },
  // Records when each line "T=<ms>" first shows on the page.
  async watch({ who }) {
    const p = await page(who);
    await p.evaluate(() => {
      window.__seen = {};
      const scan = () => {
        for (const m of document.querySelector('#cells').textContent.matchAll(/T=(\d+)/g)) {
          if (!(m[1] in window.__seen)) window.__seen[m[1]] = Date.now();
        }
      };
      new MutationObserver(scan).observe(document.querySelector('#cells'), { childList: true, subtree: true, characterData: true });
    });
    return {};
  },
  async seen({ who }) {
    const p = await page(who);
    return { seen: await p.evaluate(() => window.__seen) };
  },
  async waitfor({ who, selector, text, timeout }) {
    const p = await page(who);
    if (text) {
      await p.waitForFunction(([s, t]) => { const e = document.querySelector(s); return e && e.textContent.includes(t); }, [selector, text], { timeout: timeout || 60000 });
    } else {
      await p.waitForSelector(selector, { state: 'visible', timeout: timeout || 60000 });
    }
    return {};
  },
  async tab({ who, name }) {
    const p = await page(who);
    await p.click('#tab-' + name);
    return {};
  },
  async shot({ who, name }) {
    const p = await page(who);
    const file = path.join(shots, name + '.png');
    await p.screenshot({ path: file, fullPage: true });
    return { file };
  },
  // Answers the first pending approval in the inbox.
  async answer({ who, answer }) {
    const p = await page(who);
    await p.click('#tab-inbox');
    await p.waitForSelector('.pending button[data-answer="' + answer + '"]', { state: 'visible', timeout: 60000 });
    const text = await p.textContent('.pending pre');
    await p.click('.pending button[data-answer="' + answer + '"]');
    await p.waitForFunction(() => document.querySelectorAll('.pending').length === 0);
    await p.click('#tab-sessions');
    return { text };
  },
  async download({ who, file }) {
    const p = await page(who);
    const [dl] = await Promise.all([p.waitForEvent('download'), p.click('#download')]);
    await dl.saveAs(file);
    return {};
  },
  async audit({ who, decision }) {
    const p = await page(who);
    await p.click('#tab-audit');
    await p.selectOption('#audit-decision', decision || '');
    await p.click('#audit-form button[type=submit]');
    await p.waitForFunction(() => /row\(s\)|no audit/.test(document.querySelector('#audit-note').textContent));
    const rows = await p.$$eval('#audit tbody tr', (trs) => trs.map((tr) => Array.from(tr.cells).map((td) => td.textContent)));
    return { rows };
  },
  // Opens url (a hostile page of another origin) in who's browser, beside
  // the signed-in page, and returns what its script reports (window.__done).
  async attack({ who, url }) {
    const p = await page(who);
    const evil = await p.context().newPage();
    try {
      await evil.goto(url);
      await evil.waitForFunction(() => window.__done, null, { timeout: 60000 });
      return { report: await evil.evaluate(() => window.__done) };
    } finally {
      await evil.close();
    }
  },
  // Starts recording the messages any frame posts to the page.
  async listen({ who }) {
    const p = await page(who);
    await p.evaluate(() => {
      window.__messages = [];
      window.addEventListener('message', (e) => window.__messages.push(String(e.data)));
    });
    return {};
  },
  // The markup frames of the page (their sandbox, and what they
  // rendered), the messages posted to it, its title, and the text of its
  // cells.
  async frames({ who }) {
    const p = await page(who);
    const rendered = [];
    for (const f of p.frames()) {
      if (f === p.mainFrame()) continue;
      try {
        rendered.push(await f.evaluate(() => document.body.innerHTML));
      } catch (e) {
        rendered.push('(' + f.url() + ': ' + String(e).slice(0, 200) + ')');
      }
    }
    return { rendered, ...await p.evaluate(() => ({
      sandboxes: Array.from(document.querySelectorAll('#cells iframe')).map((f) => f.getAttribute('sandbox')),
      messages: window.__messages || [],
      title: document.title,
      cells: document.querySelector('#cells').textContent,
    })) };
  },
  // Waits until every markup frame of the page has loaded (its
  // subresources tried, and refused or not), and returns their number.
  async framesloaded({ who }) {
    const p = await page(who);
    let n = 0;
    for (const f of p.frames()) {
      if (f === p.mainFrame()) continue;
      await f.waitForLoadState('load', { timeout: 60000 });
      n++;
    }
    return { n };
  },
  // What the page shows its principal: sessions, pending approvals, and
  // the answer of the API to another principal's session.
  async state({ who, other }) {
    const p = await page(who);
    return await p.evaluate(async (other) => {
      const headers = { 'X-CSRF-Token': localStorage.getItem('ipybox-csrf') || '' };
      const get = async (u) => { const r = await fetch(u, { headers }); return { status: r.status, body: r.ok ? await r.json() : null }; };
      return {
        sessions: (await get('/ui/api/sessions')).body,
        approvals: (await get('/ui/api/approvals')).body,
        otherCells: (await get('/ui/api/cells?session=' + encodeURIComponent(other || ''))).status,
        otherNotebook: (await get('/ui/api/notebook?session=' + encodeURIComponent(other || ''))).status,
        title: document.title,
      };
    }, other);
  },
};

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const cmd = JSON.parse(line);
  let out;
  try {
    out = { ok: true, ...(await commands[cmd.cmd](cmd)) };
  } catch (e) {
    out = { ok: false, error: String(e && e.stack || e) };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}
await browser.close();
