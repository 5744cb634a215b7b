// A real OpenID Connect provider (oidc-provider) for the sign-in tests, on 127.0.0.1.
//
//   node server.mjs --port N [--alg ES256|RS256] [--ttl SECONDS]
//
// Its signing key is made afresh at each start (a restart is a key rotation). Clients:
//   spa          public, authorization code + PKCE (redirect http://127.0.0.1/callback)
//   partner-a    client credentials, client_secret_basic, secret "secret-a"
//   partner-b    client credentials, client_secret_basic, secret "secret-b"
//   partner-jwt  client credentials, private_key_jwt (ES256), its public key in IDP_PARTNER_JWK
// Accounts: any login is accepted (devInteractions); the claims each account's access tokens
// carry come from IDP_ACCOUNTS ({"accountId": {claims}}), {"role": "patient"} otherwise.
// Access tokens are JWTs for the audience IDP_AUDIENCE (default "clinic-booking").
// GET /test/stats answers how many times the key set was served.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const { values } = parseArgs({
  options: {
    port: { type: 'string' },
    alg: { type: 'string', default: 'ES256' },
    ttl: { type: 'string', default: '600' },
  },
});
const port = Number(values.port);
const alg = values.alg;
const ttl = Number(values.ttl);
const audience = process.env.IDP_AUDIENCE || 'clinic-booking';
const accounts = JSON.parse(process.env.IDP_ACCOUNTS || '{}');
const partnerJwk = process.env.IDP_PARTNER_JWK ? JSON.parse(process.env.IDP_PARTNER_JWK) : null;
const resource = 'urn:clinic-booking';

const { privateKey } = alg === 'RS256'
  ? generateKeyPairSync('rsa', { modulusLength: 2048 })
  : generateKeyPairSync('ec', { namedCurve: 'P-256' });
const signing = { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg, use: 'sig' };

const clients = [
  {
    client_id: 'spa',
    token_endpoint_auth_method: 'none',
    grant_types: ['authorization_code'],
    response_types: ['code'],
    redirect_uris: ['http://127.0.0.1/callback'],
  },
  ...['a', 'b'].map((n) => ({
    client_id: `partner-${n}`,
    client_secret: `secret-${n}`,
    token_endpoint_auth_method: 'client_secret_basic',
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
  })),
];
if (partnerJwk) {
  clients.push({
    client_id: 'partner-jwt',
    token_endpoint_auth_method: 'private_key_jwt',
    token_endpoint_auth_signing_alg: 'ES256',
    jwks: { keys: [partnerJwk] },
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
  });
}

const provider = new Provider(`http://127.0.0.1:${port}`, {
  clients,
  clientDefaults: { id_token_signed_response_alg: alg },
  jwks: { keys: [signing] },
  cookies: { keys: ['clinic-booking-tests'] },
  pkce: { required: () => true },
  ttl: { AccessToken: ttl, ClientCredentials: ttl, Interaction: 600, Session: 600, Grant: 600 },
  clientAuthMethods: ['none', 'client_secret_basic', 'private_key_jwt'],
  enabledJWA: { clientAuthSigningAlgValues: ['ES256', 'RS256'] },
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: () => ({
        scope: 'api',
        audience,
        accessTokenTTL: ttl,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg } },
      }),
    },
  },
  // No consent screen: the test account grants what the SPA asks.
  loadExistingGrant: async (ctx) => {
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid');
    grant.addResourceScope(resource, 'api');
    await grant.save();
    return grant;
  },
  findAccount: async (_ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
  extraTokenClaims: async (_ctx, token) => {
    if (!token.accountId) return undefined;
    return accounts[token.accountId] ?? { role: 'patient' };
  },
});

let served = 0;
provider.use(async (ctx, next) => {
  if (ctx.path === '/test/stats') {
    ctx.body = { jwks: served };
    return;
  }
  if (ctx.path === '/jwks') served += 1;
  await next();
});

provider.listen(port, '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${port} kid=${signing.kid}`);
});
