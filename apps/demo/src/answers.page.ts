/**
 * The page of `GET /answers`: ask a question, and read the answer's tokens as they come with an `EventSource`. A
 * question already being answered (409) follows the holder's stream. The page keeps what it received in
 * `window.received` (offsets) and counts its connections in `window.connections`, for the demo's browser test.
 */
export const ANSWERS_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Durable streams: answers</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 46rem; margin: 2rem auto; padding: 0 1rem; }
  #answer { white-space: pre-wrap; min-height: 4rem; border-left: 3px solid #888; padding-left: 1rem; }
  #state { color: #555; }
</style>
</head>
<body>
<h1>Ask the fake model</h1>
<form id="ask">
  <label>Question <input id="question" name="question" size="40" value="What are durable streams?"></label>
  <button type="submit">Ask</button>
</form>
<p id="state" role="status">Ask something.</p>
<div id="answer" aria-label="Answer"></div>
<script>
  window.received = [];
  window.connections = 0;
  const state = document.getElementById('state');
  const answer = document.getElementById('answer');
  function follow(url, how) {
    state.textContent = how;
    answer.textContent = '';
    window.received = [];
    const source = new EventSource(url);
    source.onopen = () => { window.connections += 1; };
    source.onmessage = (event) => {
      window.received.push(Number(event.lastEventId));
      answer.textContent += JSON.parse(event.data);
    };
    source.addEventListener('end', () => {
      source.close();
      state.textContent = 'Done.';
    });
    source.onerror = () => { if (source.readyState !== EventSource.CLOSED) state.textContent = 'Reconnecting...'; };
  }
  document.getElementById('ask').addEventListener('submit', async (event) => {
    event.preventDefault();
    const question = document.getElementById('question').value;
    const response = await fetch('/answers', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ question }),
    });
    const body = await response.json();
    if (response.status === 201) follow(body.tokens_url, 'Answering...');
    else if (response.status === 409) follow(response.headers.get('Location'), 'Already being answered: following ' + body.existingWorkflowId);
    else state.textContent = body.message;
  });
</script>
</body>
</html>
`;
