'use strict';
// The dashboard page: hash routes (#/, #/queue/<name>, #/search/<text>, #/workflow/<id>, #/children/<id>,
// #/schedules, #/versions) over the JSON API next to the page. No dependencies; every value is put in the DOM as
// text, never as HTML. Until a view's first data arrives, the page says "Loading…" (shown by the HTML itself, before
// this script runs).
(() => {
  const settings = JSON.parse(document.getElementById('settings').textContent);
  const api = `${location.pathname.replace(/\/+$/, '')}/api`;
  const STATUSES = [
    'ENQUEUED',
    'DELAYED',
    'PENDING',
    'WAITING',
    'SUCCESS',
    'ERROR',
    'CANCELLED',
    'MAX_RECOVERY_ATTEMPTS_EXCEEDED',
  ];
  const SHORT = { MAX_RECOVERY_ATTEMPTS_EXCEEDED: 'DEAD-LETTERED' };
  const view = document.getElementById('view');
  const updated = document.getElementById('updated');
  const notice = document.getElementById('notice');
  const loading = document.getElementById('loading');
  const numbers = new Intl.NumberFormat('en');
  let refreshView = null;
  let routeToken = 0;

  /** h('a', { href }, 'text', child...): an element with attributes (on* as listeners) and text or element children. */
  function h(tag, attributes, ...children) {
    const element = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name.startsWith('on')) element.addEventListener(name.slice(2), value);
      else element.setAttribute(name, value === true ? '' : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      element.append(child instanceof Node ? child : String(child));
    }
    return element;
  }

  async function request(path, options = {}) {
    const response = await fetch(`${api}${path}`, {
      method: options.method || 'GET',
      headers: options.method ? { 'content-type': 'application/json' } : {},
      body: options.method ? JSON.stringify(options.body || {}) : undefined,
      credentials: 'same-origin',
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const error = new Error(body.message || `${response.status} ${response.statusText}`);
      error.status = response.status;
      error.body = body;
      throw error;
    }
    return body;
  }

  const formatCount = (count) =>
    count.exact
      ? numbers.format(count.value)
      : count.estimate
        ? `≈${numbers.format(count.estimate)}`
        : `${numbers.format(count.value)}+`;
  const formatTime = (iso) => (iso ? new Date(iso).toLocaleString() : '—');
  const formatDuration = (ms) =>
    ms === null || ms === undefined
      ? '—'
      : ms < 1000
        ? `${ms.toFixed(ms < 10 ? 1 : 0)} ms`
        : `${(ms / 1000).toFixed(2)} s`;
  const json = (value) => {
    if (value === undefined) return 'undefined';
    const compact = JSON.stringify(value);
    return compact.length <= 100 ? compact : JSON.stringify(value, null, 2);
  };
  const statusBadge = (status) => h('span', { class: `badge s-${status.toLowerCase()}` }, status);
  const queueLink = (name, status) =>
    `#/queue/${encodeURIComponent(name)}${status ? `?status=${encodeURIComponent(status)}` : ''}`;
  const workflowLink = (id) => `#/workflow/${encodeURIComponent(id)}`;
  const childrenLink = (id) => `#/children/${encodeURIComponent(id)}`;
  /** A mark on a row with stored values of unexpected types (the API reports them in `unexpectedValues`). */
  const unexpectedMark = (workflow) =>
    workflow.unexpectedValues
      ? h(
          'span',
          {
            class: 'unexpected',
            title: `Unexpected stored values: ${workflow.unexpectedValues
              .map(({ field, value }) => `${field} = ${value}`)
              .join('; ')}`,
          },
          ' ⚠',
        )
      : '';

  function say(message, isError) {
    notice.textContent = message;
    notice.className = isError ? 'notice error' : 'notice';
    notice.setAttribute('role', isError ? 'alert' : 'status');
  }

  function stamp() {
    updated.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  }

  /** Resolves true when the operator confirms in the page's dialog. */
  function confirmAction(title, text) {
    const dialog = document.getElementById('confirm');
    document.getElementById('confirm-title').textContent = title;
    document.getElementById('confirm-text').textContent = text;
    return new Promise((resolve) => {
      const ok = document.getElementById('confirm-ok');
      const back = document.getElementById('confirm-back');
      const close = (answer) => {
        ok.removeEventListener('click', onOk);
        back.removeEventListener('click', onBack);
        dialog.removeEventListener('cancel', onBack);
        dialog.close();
        resolve(answer);
      };
      const onOk = () => close(true);
      const onBack = (event) => {
        event.preventDefault();
        close(false);
      };
      ok.addEventListener('click', onOk);
      back.addEventListener('click', onBack);
      dialog.addEventListener('cancel', onBack);
      dialog.showModal();
      back.focus();
    });
  }

  /** Runs an action, says how it went, and refreshes the view. */
  /**
   * A button that cancels or resumes every workflow of the queue that the list's status filter matches (all of the
   * queue's workflows without one), after a confirmation, and says how many it changed.
   */
  function bulkButton(label, action, queueName, query, danger) {
    const status = query.get('status') || undefined;
    return h(
      'button',
      {
        type: 'button',
        class: danger ? 'danger' : undefined,
        onclick: async () => {
          const scope = `${status ? `${status} ` : ''}workflows of queue ${queueName}`;
          if (await confirmAction(`${label}?`, `Acts on every ${scope} at once.`)) {
            await act(label, async () => {
              const { results } = await request(`/workflows/${action}`, {
                method: 'POST',
                body: { queueName, ...(status ? { status } : {}) },
              });
              const changed = results.filter((result) => ['cancelled', 'resumed', 'forked'].includes(result.outcome));
              say(`${label}: ${changed.length} of ${results.length} matched.`);
            });
          }
        },
      },
      label,
    );
  }

  async function act(label, work) {
    try {
      const result = await work();
      say(`${label}: done.`);
      if (refreshView) await refreshView();
      return result;
    } catch (error) {
      const holder = error.body && error.body.existingWorkflowId;
      say(`${label} failed: ${error.message}${holder ? ` (held by ${holder})` : ''}`, true);
      return undefined;
    }
  }

  function replaceIfChanged(container, key, build) {
    if (container.dataset.key === key) return;
    container.dataset.key = key;
    container.replaceChildren(build());
  }

  // ----- the queues at a glance -----

  function queuesTable(queues) {
    return h(
      'table',
      { class: 'queues' },
      h('caption', {}, 'Workflows per queue and status'),
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          h('th', { scope: 'col' }, 'Queue'),
          h('th', { scope: 'col' }, 'State'),
          STATUSES.map((status) => h('th', { scope: 'col', class: 'num', title: status }, SHORT[status] || status)),
          h('th', { scope: 'col', class: 'num' }, 'Finished, 1 min'),
          h('th', { scope: 'col', class: 'num' }, 'Finished, 5 min'),
        ),
      ),
      h(
        'tbody',
        {},
        queues.map((queue) =>
          h(
            'tr',
            {},
            h('th', { scope: 'row' }, h('a', { href: queueLink(queue.name) }, queue.name)),
            h('td', {}, queue.paused ? h('span', { class: 'badge paused' }, 'Paused') : 'Running'),
            STATUSES.map((status) =>
              h(
                'td',
                { class: 'num' },
                h(
                  'a',
                  {
                    href: queueLink(queue.name, status),
                    'aria-label': `${queue.name} ${status}: ${formatCount(queue.counts[status])}`,
                  },
                  formatCount(queue.counts[status]),
                ),
              ),
            ),
            h('td', { class: 'num' }, numbers.format(queue.finished.lastMinute)),
            h('td', { class: 'num' }, numbers.format(queue.finished.last5Minutes)),
          ),
        ),
      ),
    );
  }

  async function showOverview(token) {
    const counts = h('div', { class: 'scroll', 'aria-live': 'polite' });
    view.replaceChildren(h('h1', {}, 'Queues'), counts);
    refreshView = async () => {
      const { queues } = await request('/queues');
      if (token !== routeToken) return;
      replaceIfChanged(counts, JSON.stringify(queues), () => queuesTable(queues));
      stamp();
    };
    await refreshView();
  }

  // ----- lists of workflows -----

  function workflowRows(workflows) {
    return workflows.map((workflow) =>
      h(
        'tr',
        {},
        h(
          'th',
          { scope: 'row' },
          h('a', { href: workflowLink(workflow.workflowId), class: 'mono' }, workflow.workflowId),
        ),
        h('td', {}, workflow.workflowName),
        h('td', {}, statusBadge(workflow.status), unexpectedMark(workflow)),
        h(
          'td',
          { class: 'mono' },
          workflow.deduplicationId || '—',
          workflow.holdsDeduplicationId ? h('span', { class: 'holds' }, ' (holds it)') : '',
        ),
        h('td', { class: 'mono' }, workflow.partitionKey || '—'),
        h('td', {}, formatTime(workflow.createdAt)),
        h('td', { class: 'num' }, workflow.attempts),
      ),
    );
  }

  /** A list with its total and "Load more"; `query` is the API's filter string. */
  function workflowList(caption, showQueue) {
    const total = h('p', { class: 'total' });
    const body = h('tbody');
    const more = h('button', { type: 'button', hidden: true }, 'Load more');
    const table = h(
      'table',
      { class: 'workflows' },
      h('caption', {}, caption),
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ['Workflow ID', 'Workflow', 'Status', 'Deduplication ID', 'Partition key', 'Created', 'Attempts'].map(
            (label) => h('th', { scope: 'col', class: label === 'Attempts' ? 'num' : undefined }, label),
          ),
        ),
      ),
      body,
    );
    let nextCursor = null;
    let query = '';
    let pages = 1;
    const load = async (append) => {
      const page = await request(
        `/workflows?${query}${append && nextCursor ? `&cursor=${encodeURIComponent(nextCursor)}` : ''}`,
      );
      nextCursor = page.nextCursor;
      more.hidden = !nextCursor;
      total.textContent = `${formatCount(page.total)} workflow${page.total.value === 1 && page.total.exact ? '' : 's'}`;
      const rows = workflowRows(page.workflows);
      if (append) body.append(...rows);
      else if (body.dataset.key !== JSON.stringify(page.workflows)) {
        body.dataset.key = JSON.stringify(page.workflows);
        body.replaceChildren(...(rows.length ? rows : [h('tr', {}, h('td', { colspan: 7 }, 'No workflows.'))]));
      }
    };
    more.addEventListener('click', () => {
      pages += 1;
      load(true).catch((error) => say(error.message, true));
    });
    return {
      element: h('div', { class: 'list' }, total, h('div', { class: 'scroll' }, table), more),
      /** Loads the first page for `newQuery`; a refresh leaves a list alone once more pages were loaded. */
      async show(newQuery, isRefresh) {
        if (isRefresh && pages > 1) return;
        if (newQuery !== query) pages = 1;
        query = newQuery;
        await load(false);
      },
      showQueue,
    };
  }

  function filtersForm(queueName, params) {
    const field = (name, label, type) =>
      h('label', {}, label, h('input', { name, type: type || 'text', value: params.get(name) || undefined }));
    const form = h(
      'form',
      { class: 'filters' },
      field('workflowName', 'Workflow name'),
      field('deduplicationId', 'Deduplication ID'),
      field('partitionKey', 'Partition key'),
      field('parentWorkflowId', 'Parent workflow ID'),
      field('createdFrom', 'Created from', 'datetime-local'),
      field('createdTo', 'Created before', 'datetime-local'),
      h('button', { type: 'submit' }, 'Apply filters'),
    );
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const next = new URLSearchParams();
      if (params.get('status')) next.set('status', params.get('status'));
      for (const [name, value] of new FormData(form)) if (value) next.set(name, String(value));
      location.hash = `#/queue/${encodeURIComponent(queueName)}?${next}`;
    });
    return h(
      'details',
      { class: 'filter-box', open: [...params.keys()].some((key) => key !== 'status') },
      h('summary', {}, 'Filters'),
      form,
    );
  }

  function limitsForm(queue) {
    const limits = queue.limits || {};
    const rate = limits.rateLimit || {};
    const number = (name, label, value) =>
      h(
        'label',
        {},
        label,
        h('input', {
          name,
          type: 'number',
          min: 1,
          step: 1,
          inputmode: 'numeric',
          value: value === undefined ? undefined : value,
          placeholder: 'unset',
        }),
      );
    const form = h(
      'form',
      { class: 'limits' },
      number('concurrency', 'Concurrency (all processes)', limits.concurrency),
      number('workerConcurrency', 'Per process', limits.workerConcurrency),
      number('partitionConcurrency', 'Per partition key', limits.partitionConcurrency),
      number('rateLimit', 'Rate limit (starts)', rate.limit),
      number('ratePeriodMs', 'per (ms)', rate.periodMs),
      h('button', { type: 'submit' }, 'Save limits'),
    );
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const data = new FormData(form);
      const value = (name) => (data.get(name) === '' ? null : Number(data.get(name)));
      const body = {
        concurrency: value('concurrency'),
        workerConcurrency: value('workerConcurrency'),
        partitionConcurrency: value('partitionConcurrency'),
        rateLimit:
          value('rateLimit') === null && value('ratePeriodMs') === null
            ? null
            : {
                limit: value('rateLimit'),
                periodMs: value('ratePeriodMs'),
                ...(rate.perPartition ? { perPartition: true } : {}),
              },
      };
      act('Save limits', () => request(`/queues/${encodeURIComponent(queue.name)}/limits`, { method: 'PATCH', body }));
    });
    return h('details', { class: 'filter-box' }, h('summary', {}, 'Limits (empty: as declared)'), form);
  }

  async function showQueue(token, name, params) {
    const status = params.get('status') || '';
    const header = h('div', { class: 'queue-head' });
    const tabs = h('nav', { 'aria-label': 'Statuses', class: 'tabs' });
    const list = workflowList(status ? `${status} workflows of ${name}` : `Workflows of ${name}`);
    const extra = h('div');
    view.replaceChildren(
      h('p', {}, h('a', { href: '#/' }, '← All queues')),
      header,
      extra,
      tabs,
      filtersForm(name, params),
      list.element,
    );
    const query = new URLSearchParams(params);
    query.set('queue', name);
    let queueShown = false;
    refreshView = async (isRefresh) => {
      const [{ queues }] = await Promise.all([request('/queues'), list.show(query.toString(), isRefresh)]);
      if (token !== routeToken) return;
      const queue = queues.find((candidate) => candidate.name === name);
      if (!queue) throw new Error(`Queue "${name}" is not declared`);
      replaceIfChanged(header, JSON.stringify([queue.paused, queue.limits, queue.finished]), () =>
        h(
          'div',
          {},
          h('h1', {}, `Queue ${name} `, queue.paused ? h('span', { class: 'badge paused' }, 'Paused') : ''),
          h(
            'p',
            { class: 'meta' },
            `Finished in the last minute: ${numbers.format(queue.finished.lastMinute)}, last 5 minutes: `,
            numbers.format(queue.finished.last5Minutes),
            '. ',
            describeLimits(queue.limits),
          ),
          h(
            'div',
            { class: 'actions' },
            queue.paused
              ? h(
                  'button',
                  {
                    type: 'button',
                    onclick: () =>
                      act('Resume queue', () =>
                        request(`/queues/${encodeURIComponent(name)}/resume`, { method: 'POST' }),
                      ),
                  },
                  'Resume queue',
                )
              : h(
                  'button',
                  {
                    type: 'button',
                    class: 'danger',
                    onclick: async () => {
                      if (
                        await confirmAction(
                          `Pause queue ${name}?`,
                          'No process starts its workflows until it is resumed; enqueues still succeed.',
                        )
                      ) {
                        await act('Pause queue', () =>
                          request(`/queues/${encodeURIComponent(name)}/pause`, { method: 'POST' }),
                        );
                      }
                    },
                  },
                  'Pause queue',
                ),
            bulkButton('Cancel all matching', 'cancel-matching', name, query, true),
            bulkButton('Resume all matching', 'resume-matching', name, query, false),
            bulkButton('Retry all matching from their failed step', 'fork-matching', name, query, false),
          ),
        ),
      );
      if (!queueShown) {
        queueShown = true;
        extra.replaceChildren(limitsForm(queue));
      }
      replaceIfChanged(tabs, JSON.stringify(queue.counts), () =>
        h(
          'ul',
          {},
          [''].concat(STATUSES).map((tab) =>
            h(
              'li',
              {},
              h(
                'a',
                {
                  href: queueLink(name, tab),
                  'aria-current': tab === status ? 'page' : undefined,
                },
                tab ? `${SHORT[tab] || tab} ${formatCount(queue.counts[tab])}` : 'All',
              ),
            ),
          ),
        ),
      );
      stamp();
    };
    await refreshView(false);
  }

  function describeLimits(limits) {
    const parts = [];
    if (limits.concurrency) parts.push(`concurrency ${limits.concurrency}`);
    if (limits.workerConcurrency) parts.push(`${limits.workerConcurrency} per process`);
    if (limits.partitionConcurrency) parts.push(`${limits.partitionConcurrency} per partition key`);
    if (limits.rateLimit) {
      parts.push(
        `at most ${limits.rateLimit.limit} per ${limits.rateLimit.periodMs} ms` +
          (limits.rateLimit.perPartition ? ' per key' : ''),
      );
    }
    return parts.length ? `Limits: ${parts.join(', ')}.` : 'No limits.';
  }

  async function showChildren(token, parentId) {
    const list = workflowList(`Workflows enqueued by ${parentId} (in any queue)`);
    view.replaceChildren(
      h('p', {}, h('a', { href: workflowLink(parentId) }, `← Workflow ${parentId}`)),
      h('h1', {}, 'Children'),
      list.element,
    );
    refreshView = async (isRefresh) => {
      await list.show(new URLSearchParams({ parentWorkflowId: parentId }).toString(), isRefresh);
      if (token === routeToken) stamp();
    };
    await refreshView(false);
  }

  async function showSearch(token, text) {
    const list = workflowList(`Workflows whose ID or deduplication ID is “${text}”`);
    view.replaceChildren(h('h1', {}, 'Search results'), list.element);
    document.getElementById('search').value = text;
    refreshView = async (isRefresh) => {
      await list.show(new URLSearchParams({ search: text }).toString(), isRefresh);
      if (token === routeToken) stamp();
    };
    await refreshView(false);
  }

  // ----- one workflow -----

  function field(label, ...value) {
    return [h('dt', {}, label), h('dd', {}, ...value)];
  }

  function errorBlock(error) {
    return h(
      'pre',
      { class: 'error-text' },
      `${error.name}: ${error.message}${error.stack ? `\n\n${error.stack}` : ''}`,
    );
  }

  function stepsTable(workflow) {
    const steps = workflow.steps;
    if (!steps.length) return h('p', {}, 'No steps recorded.');
    const starts = steps.map((step) => Date.parse(step.startedAt || step.completedAt));
    const origin = Math.min(...starts);
    const end = Math.max(...steps.map((step) => Date.parse(step.completedAt)));
    const span = Math.max(end - origin, 1);
    return h(
      'div',
      { class: 'scroll' },
      h(
        'table',
        { class: 'steps' },
        h('caption', {}, 'Steps, in the order they ran'),
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ['#', 'Step', 'Started', 'Duration', 'Timeline', 'Result or error'].map((label) =>
              h('th', { scope: 'col' }, label),
            ),
          ),
        ),
        h(
          'tbody',
          {},
          steps.map((step, index) => {
            const left = ((starts[index] - origin) / span) * 100;
            const width = Math.max(((Date.parse(step.completedAt) - starts[index]) / span) * 100, 0.5);
            return h(
              'tr',
              { class: step.error ? 'failed' : undefined },
              h('td', { class: 'num' }, step.index),
              h('th', { scope: 'row' }, step.name),
              h('td', {}, formatTime(step.startedAt)),
              h('td', { class: 'num' }, formatDuration(step.durationMs)),
              h(
                'td',
                { class: 'timeline', 'aria-hidden': 'true' },
                h('span', { class: 'bar', style: undefined, 'data-left': left, 'data-width': width }),
              ),
              h('td', {}, step.error ? errorBlock(step.error) : h('pre', {}, json(step.output))),
            );
          }),
        ),
      ),
    );
  }

  function streamsTable(workflow) {
    if (!workflow.streams.length) return h('p', {}, 'No streams written.');
    return h(
      'div',
      { class: 'scroll' },
      h(
        'table',
        { class: 'streams' },
        h('caption', {}, 'Streams (writeStream), by key'),
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ['Key', 'Values', 'Bytes', 'State', 'Last written', 'Last values'].map((label) =>
              h('th', { scope: 'col' }, label),
            ),
          ),
        ),
        h(
          'tbody',
          {},
          workflow.streams.map((stream) =>
            h(
              'tr',
              {},
              h('th', { scope: 'row', class: 'mono' }, stream.key),
              h('td', { class: 'num' }, stream.values),
              h('td', { class: 'num' }, stream.bytes),
              h('td', {}, stream.closed ? 'closed' : 'open'),
              h('td', {}, formatTime(stream.lastWrittenAt)),
              h(
                'td',
                {},
                h('pre', {}, stream.recent.map((entry) => `${entry.offset}: ${json(entry.value)}`).join('\n')),
              ),
            ),
          ),
        ),
      ),
    );
  }

  /** NOTE: the CSP allows no inline style attributes; bar geometry is set through the CSSOM instead. */
  function placeBars(root) {
    for (const bar of root.querySelectorAll('.bar')) {
      bar.style.marginLeft = `${bar.dataset.left}%`;
      bar.style.width = `${bar.dataset.width}%`;
    }
  }

  function workflowActions(workflow) {
    const id = workflow.workflowId;
    const buttons = [];
    if (['ENQUEUED', 'DELAYED', 'PENDING', 'WAITING'].includes(workflow.status)) {
      buttons.push(
        h(
          'button',
          {
            type: 'button',
            class: 'danger',
            onclick: async () => {
              const running =
                workflow.status === 'PENDING'
                  ? ' It is running: its body is told to stop and its outcome is not recorded.'
                  : '';
              if (
                await confirmAction(
                  'Cancel this workflow?',
                  `Workflow ${id} ends as CANCELLED and frees its deduplication ID.${running}`,
                )
              ) {
                await act('Cancel', () => request(`/workflows/${encodeURIComponent(id)}/cancel`, { method: 'POST' }));
              }
            },
          },
          'Cancel',
        ),
      );
    }
    if (workflow.status === 'CANCELLED' || workflow.status === 'MAX_RECOVERY_ATTEMPTS_EXCEEDED') {
      buttons.push(
        h(
          'button',
          {
            type: 'button',
            onclick: () =>
              act('Resume', () => request(`/workflows/${encodeURIComponent(id)}/resume`, { method: 'POST' })),
          },
          'Resume',
        ),
      );
    }
    if (['ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'].includes(workflow.status)) {
      buttons.push(
        h(
          'button',
          {
            type: 'button',
            onclick: async () => {
              const fork = await act('Retry from the failed step', () =>
                request(`/workflows/${encodeURIComponent(id)}/fork`, { method: 'POST', body: {} }),
              );
              if (fork) location.hash = workflowLink(fork.workflowId);
            },
          },
          'Retry from the failed step',
        ),
      );
    }
    buttons.push(
      h(
        'button',
        {
          type: 'button',
          onclick: async () => {
            const result = await act('Re-run', () =>
              request(`/workflows/${encodeURIComponent(id)}/rerun`, { method: 'POST' }),
            );
            if (result) location.hash = workflowLink(result.workflowId);
          },
        },
        'Re-run',
      ),
    );
    const row = h('div', { class: 'actions' }, buttons);
    if (workflow.status !== 'ENQUEUED' && workflow.status !== 'DELAYED') return row;
    const delay = h('input', { name: 'delaySeconds', type: 'number', min: 0, step: 1, value: 0 });
    const priority = h('input', { name: 'priority', type: 'number', step: 1, value: workflow.priority });
    const form = h(
      'form',
      { class: 'reschedule' },
      h('label', {}, 'Start in (seconds)', delay),
      h('label', {}, 'Priority', priority),
      h('button', { type: 'submit' }, 'Reschedule'),
    );
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      act('Reschedule', () =>
        request(`/workflows/${encodeURIComponent(id)}/reschedule`, {
          method: 'POST',
          body: { delayMs: Number(delay.value) * 1000, priority: Number(priority.value) },
        }),
      );
    });
    return h('div', {}, row, form);
  }

  function workflowView(workflow) {
    const outcome = workflow.error
      ? [h('h2', {}, 'Error'), errorBlock(workflow.error)]
      : workflow.status === 'SUCCESS'
        ? [h('h2', {}, 'Result'), h('pre', {}, json(workflow.output))]
        : [];
    const element = h(
      'div',
      {},
      h('p', {}, h('a', { href: queueLink(workflow.queueName) }, `← Queue ${workflow.queueName}`)),
      h('h1', {}, 'Workflow ', h('span', { class: 'mono' }, workflow.workflowId), ' ', statusBadge(workflow.status)),
      workflowActions(workflow),
      h(
        'div',
        { class: 'detail' },
        h(
          'dl',
          { class: 'fields' },
          field('Status', workflow.status),
          field('Queue', h('a', { href: queueLink(workflow.queueName) }, workflow.queueName)),
          field('Workflow', `${workflow.workflowName} (version ${workflow.version})`),
          workflow.forkedFrom
            ? field(
                'Forked from',
                h('a', { href: workflowLink(workflow.forkedFrom), class: 'mono' }, workflow.forkedFrom),
              )
            : [],
          field(
            'Deduplication ID',
            workflow.deduplicationId || '—',
            workflow.holdsDeduplicationId ? ' (holds it: an enqueue with it is refused)' : '',
          ),
          field('Partition key', workflow.partitionKey || '—'),
          field('Priority', workflow.priority),
          field(
            'Attempts',
            `${workflow.attempts} (failed ${workflow.failedAttempts} of at most ${workflow.maxAttempts})`,
          ),
          field('Recoveries', `${workflow.recoveryAttempts} of at most ${workflow.maxRecoveryAttempts}`),
          field('Executor', workflow.executorId || '—'),
          field('Created', formatTime(workflow.createdAt)),
          field('Started', formatTime(workflow.startedAt)),
          field('Finished', formatTime(workflow.completedAt)),
          workflow.notBefore ? field('Not before', formatTime(workflow.notBefore)) : [],
          workflow.deadlineAt ? field('Deadline', formatTime(workflow.deadlineAt)) : [],
          workflow.parentWorkflowId
            ? field(
                'Parent',
                h('a', { href: workflowLink(workflow.parentWorkflowId), class: 'mono' }, workflow.parentWorkflowId),
              )
            : [],
          workflow.children.length
            ? field(
                'Children',
                h(
                  'ul',
                  { class: 'children' },
                  workflow.children.map((child) =>
                    h('li', {}, h('a', { href: workflowLink(child.workflowId), class: 'mono' }, child.workflowId)),
                  ),
                ),
                h('a', { href: childrenLink(workflow.workflowId) }, 'List them with their statuses'),
              )
            : [],
          workflow.unexpectedValues
            ? field(
                'Unexpected values',
                h(
                  'ul',
                  { class: 'unexpected' },
                  workflow.unexpectedValues.map(({ field: name, value }) =>
                    h('li', { class: 'mono' }, `${name} = ${value}`),
                  ),
                ),
              )
            : [],
        ),
        h('div', {}, h('h2', {}, 'Inputs'), h('pre', {}, json(workflow.inputs)), outcome),
      ),
      h('h2', {}, 'Steps'),
      stepsTable(workflow),
      h('h2', {}, 'Streams'),
      streamsTable(workflow),
    );
    placeBars(element);
    return element;
  }

  async function showWorkflow(token, id) {
    const container = h('div');
    view.replaceChildren(container);
    refreshView = async () => {
      try {
        const workflow = await request(`/workflows/${encodeURIComponent(id)}`);
        if (token !== routeToken) return;
        replaceIfChanged(container, JSON.stringify(workflow), () => workflowView(workflow));
      } catch (error) {
        if (error.status !== 404) throw error;
        replaceIfChanged(container, '404', () => h('div', {}, h('h1', {}, 'Not found'), h('p', {}, error.message)));
      }
      if (token === routeToken) stamp();
    };
    await refreshView();
  }

  // ----- schedules -----

  function scheduleRow(schedule) {
    const path = `/schedules/${encodeURIComponent(schedule.name)}`;
    const toggle = schedule.paused ? 'Resume' : 'Pause';
    return h(
      'tr',
      {},
      h('th', { scope: 'row', class: 'mono' }, schedule.name),
      h('td', { class: 'mono' }, schedule.cron, schedule.timezone ? ` (${schedule.timezone})` : ''),
      h('td', {}, schedule.workflowName),
      h('td', {}, h('a', { href: queueLink(schedule.queueName) }, schedule.queueName)),
      h('td', {}, schedule.paused ? h('span', { class: 'badge paused' }, 'Paused') : 'Active'),
      h('td', {}, formatTime(schedule.nextRunAt)),
      h(
        'td',
        {},
        schedule.lastWorkflowId
          ? h('a', { href: workflowLink(schedule.lastWorkflowId) }, formatTime(schedule.lastRunAt))
          : formatTime(schedule.lastRunAt),
      ),
      h(
        'td',
        { class: 'row-actions' },
        h(
          'button',
          {
            type: 'button',
            'aria-label': `${toggle} ${schedule.name}`,
            onclick: () =>
              act(`${toggle} schedule ${schedule.name}`, () =>
                request(`${path}/${toggle.toLowerCase()}`, { method: 'POST' }),
              ),
          },
          toggle,
        ),
        h(
          'button',
          {
            type: 'button',
            'aria-label': `Trigger ${schedule.name}`,
            onclick: () =>
              act(`Trigger schedule ${schedule.name}`, () => request(`${path}/trigger`, { method: 'POST' })),
          },
          'Trigger',
        ),
      ),
    );
  }

  function schedulesTable(schedules) {
    if (!schedules.length) {
      return h('p', {}, 'No schedules: @Scheduled() methods and ScheduleService.create() add them.');
    }
    return h(
      'table',
      { class: 'schedules' },
      h('caption', {}, 'Schedules'),
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ['Schedule', 'Cron', 'Workflow', 'Queue', 'State', 'Next run', 'Last run', 'Actions'].map((label) =>
            h('th', { scope: 'col' }, label),
          ),
        ),
      ),
      h('tbody', {}, schedules.map(scheduleRow)),
    );
  }

  async function showSchedules(token) {
    const list = h('div', { class: 'scroll', 'aria-live': 'polite' });
    view.replaceChildren(h('h1', {}, 'Schedules'), list);
    refreshView = async () => {
      const { schedules } = await request('/schedules');
      if (token !== routeToken) return;
      replaceIfChanged(list, JSON.stringify(schedules), () => schedulesTable(schedules));
      stamp();
    };
    await refreshView();
  }

  // ----- versions -----

  function versionsView(report) {
    const stranded = report.stranded.length
      ? h(
          'table',
          { class: 'stranded' },
          h('caption', {}, 'Runs no live executor would claim'),
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              ['Queue', 'Workflow', 'Version', 'Runs'].map((label) => h('th', { scope: 'col' }, label)),
            ),
          ),
          h(
            'tbody',
            {},
            report.stranded.map((runs) =>
              h(
                'tr',
                {},
                h('td', {}, h('a', { href: queueLink(runs.queueName) }, runs.queueName)),
                h('td', {}, runs.workflowName),
                h('td', { class: 'num' }, runs.version),
                h('td', { class: 'num' }, numbers.format(runs.count)),
              ),
            ),
          ),
        )
      : h('p', {}, 'Every queued or waiting run has a live executor that registers its workflow and version.');
    return h(
      'div',
      {},
      stranded,
      h(
        'table',
        { class: 'versions' },
        h('caption', {}, 'Runs in flight per workflow version'),
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ['Workflow', 'Version', 'Runs in flight', 'Live executors'].map((label) =>
              h('th', { scope: 'col' }, label),
            ),
          ),
        ),
        h(
          'tbody',
          {},
          report.versions.map((version) =>
            h(
              'tr',
              { class: version.unfinished > 0 && version.executors === 0 ? 'unserved' : undefined },
              h('th', { scope: 'row' }, version.workflowName),
              h('td', { class: 'num' }, version.version),
              h('td', { class: 'num' }, numbers.format(version.unfinished)),
              h('td', { class: 'num' }, version.executors),
            ),
          ),
        ),
      ),
      h('p', { class: 'meta' }, `Checked ${formatTime(report.checkedAt)}.`),
    );
  }

  async function showVersions(token) {
    const content = h('div', { class: 'scroll', 'aria-live': 'polite' });
    view.replaceChildren(h('h1', {}, 'Workflow versions'), content);
    refreshView = async () => {
      const report = await request('/versions');
      if (token !== routeToken) return;
      replaceIfChanged(content, JSON.stringify(report), () => versionsView(report));
      stamp();
    };
    await refreshView();
  }

  // ----- routing and refreshing -----

  async function route() {
    const token = ++routeToken;
    refreshView = null;
    const [path, search] = location.hash.replace(/^#/, '').split('?');
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    const params = new URLSearchParams(search || '');
    loading.hidden = false;
    view.setAttribute('aria-busy', 'true');
    try {
      if (parts[0] === 'queue' && parts[1]) await showQueue(token, parts[1], params);
      else if (parts[0] === 'search' && parts[1]) await showSearch(token, parts[1]);
      else if (parts[0] === 'children' && parts[1]) await showChildren(token, parts[1]);
      else if (parts[0] === 'workflow' && parts[1]) await showWorkflow(token, parts[1]);
      else if (parts[0] === 'schedules') await showSchedules(token);
      else if (parts[0] === 'versions') await showVersions(token);
      else await showOverview(token);
    } catch (error) {
      say(error.message, true);
    } finally {
      if (token === routeToken) {
        loading.hidden = true;
        view.removeAttribute('aria-busy');
      }
    }
  }

  document.getElementById('search-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const text = document.getElementById('search').value.trim();
    if (text) location.hash = `#/search/${encodeURIComponent(text)}`;
  });
  window.addEventListener('hashchange', () => {
    say('');
    route().then(() => view.focus({ preventScroll: true }));
  });

  let refreshing = false;
  setInterval(async () => {
    if (refreshing || !refreshView || document.hidden || document.getElementById('confirm').open) return;
    refreshing = true;
    try {
      await refreshView(true);
    } catch (error) {
      say(`Refresh failed: ${error.message}`, true);
    } finally {
      refreshing = false;
    }
  }, settings.refreshIntervalMs);

  route();
})();
