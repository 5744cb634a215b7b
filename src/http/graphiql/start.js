// Starts GraphiQL on the page `GET /graphql` serves: queries and mutations go to the page's own
// URL (POST), subscriptions to that URL + `/ws` over graphql-transport-ws. Both follow the
// page, so the IDE also works behind a proxy that mounts the service under a path prefix.
(function () {
  'use strict';
  var endpoint = new URL(window.location.pathname, window.location.href);
  var subscriptions = new URL(endpoint.pathname.replace(/\/$/, '') + '/ws', endpoint);
  subscriptions.protocol = endpoint.protocol === 'https:' ? 'wss:' : 'ws:';
  var fetcher = GraphiQL.createFetcher({ url: endpoint.href, subscriptionUrl: subscriptions.href });
  var defaultQuery = [
    '# clinic-booking. Queries and mutations are sent to this URL, subscriptions over',
    '# WebSocket. To act as someone, put a bearer token in the Headers tab below:',
    '#   {"Authorization": "Bearer <token>"}',
    '# (it is also sent in connection_init for subscriptions).',
    '',
    '{',
    '  doctors(first: 5) {',
    '    nodes { id name specialty timezone }',
    '  }',
    '}',
    '',
  ].join('\n');
  ReactDOM.createRoot(document.getElementById('graphiql')).render(
    React.createElement(GraphiQL, {
      fetcher: fetcher,
      defaultQuery: defaultQuery,
      defaultEditorToolsVisibility: true,
    })
  );
})();
