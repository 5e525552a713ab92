// Make a payment through `once` with a client generated from its API
// document: `openapi-typescript` turns the served /openapi.json into
// generated/schema.d.ts (not committed), `openapi-fetch` calls the API with
// those types, so a request or answer the document does not allow does not
// compile. tests/clients/run.sh does all of it against a real `once up` in
// CI; docs/api.md ("Call it from your language") says how to run it by hand.
//
// What it shows, in the order a payment API is used:
// 1. one `Idempotency-Key` for the operation, reused by every retry: after a
//    connection error or a timeout (the answer may have been lost, the
//    payment may have been made), after 429/503 and 409
//    IDEMPOTENCY_REQUEST_IN_PROGRESS (waiting `Retry-After`), after 202 (the
//    outcome is being recovered);
// 2. a retry of a finished operation is its stored answer, replayed
//    (`Idempotent-Replayed: true`);
// 3. the same key with another body is refused (409), in the error model;
// 4. the payment read back by id, and listed by its merchant reference.
//
// The key is sent bare, as clients written before the IETF draft do; its
// Structured Field form (`"…"`) names the same key.
//
// Exits non-zero, with what went wrong, when any answer is not the one the
// contract states.

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import createClient from "openapi-fetch";

import type { components, paths } from "../generated/schema.js";

type ErrorCode = components["schemas"]["ErrorCode"];
type ErrorBody = components["schemas"]["ErrorBody"];
type Payment =
  | components["schemas"]["PaymentV2"]
  | components["schemas"]["PaymentV1"];
type Pending = components["schemas"]["PendingBody"];

// Refusals after which the same request, with the same key, may succeed:
// nothing was done, or what was done is recorded under the key.
const RETRIED: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  "IDEMPOTENCY_REQUEST_IN_PROGRESS", // 409: the first attempt is running
  "RATE_LIMITED", // 429
  "SERVICE_OVERLOADED", // 503, shed before any work
  "SERVICE_UNAVAILABLE", // 503
  "INTERNAL_ERROR", // 500: the key makes the retry safe
  "REQUEST_TIMEOUT", // 408: the body did not arrive
  "MISDIRECTED_REQUEST", // 421: the tenant moved; nothing was written
]);
const MAX_ATTEMPTS = 8;

class Refused extends Error {}

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Refused(`${name} is not set`);
  return value;
}

/** Exponential, capped, with full jitter: retries spread out. */
function backoff(attempt: number): number {
  return Math.random() * Math.min(5, 0.2 * 2 ** attempt);
}

function retryAfter(response: Response): number | undefined {
  const value = response.headers.get("retry-after");
  return value && /^[0-9]+$/.test(value) ? Number(value) : undefined;
}

function isErrorBody(value: unknown): value is ErrorBody {
  return typeof value === "object" && value !== null && "errorCode" in value;
}

interface Answer<T> {
  data?: T | undefined;
  error?: unknown;
  response: Response;
}

/** `call` until its answer is final; each attempt printed. */
async function withRetries<T>(
  what: string,
  call: () => Promise<Answer<T>>,
): Promise<Answer<T>> {
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    let answer: Answer<T>;
    try {
      answer = await call();
    } catch (error) {
      // fetch rejects on a timeout (AbortSignal.timeout) and on a
      // connection error; either way the answer may have been lost.
      const name = error instanceof Error ? error.name : String(error);
      console.log(`${what}: attempt ${attempt}: ${name === "TimeoutError" ? "timed out" : `connection error (${name})`}; retrying with the same key`);
      await sleep(backoff(attempt) * 1000);
      continue;
    }
    const { response, error, data } = answer;
    const replayed = response.headers.get("idempotent-replayed") === "true";
    if (response.status === 202) {
      const wait = retryAfter(response) ?? backoff(attempt);
      console.log(`${what}: attempt ${attempt}: 202 processing; retrying after ${wait} s`);
      await sleep(wait * 1000);
      continue;
    }
    if (isErrorBody(error) && RETRIED.has(error.errorCode)) {
      const wait = retryAfter(response) ?? backoff(attempt);
      console.log(`${what}: attempt ${attempt}: ${response.status} ${error.errorCode}; retrying after ${wait} s`);
      await sleep(wait * 1000);
      continue;
    }
    if (data === undefined && error === undefined) {
      throw new Refused(`${what}: ${response.status} with no body`);
    }
    console.log(`${what}: attempt ${attempt}: ${response.status}${replayed ? " (replayed)" : ""}`);
    return answer;
  }
  throw new Refused(`${what}: no final answer after ${MAX_ATTEMPTS} attempts`);
}

function expectPayment(answer: Answer<Payment | Pending>, status: number): Payment {
  if (answer.response.status !== status || answer.data === undefined || !("id" in answer.data)) {
    throw new Refused(`expected ${status} and a payment, got ${answer.response.status}: ${JSON.stringify(answer.error)}`);
  }
  return answer.data;
}

async function main(): Promise<void> {
  const timeoutMs = Number(process.env.ONCE_TIMEOUT_SECONDS ?? "10") * 1000;
  const client = createClient<paths>({
    baseUrl: env("ONCE_URL"),
    headers: { Authorization: `Bearer ${env("ONCE_API_KEY")}` },
  });
  const key = randomUUID();
  const reference = `example-typescript-${key}`;
  const body: components["schemas"]["PaymentRequest"] = {
    accountId: "acc_example",
    amount: "10.00",
    currency: "EUR",
    merchantReference: reference,
    channel: "web",
  };
  const create = (request = body) =>
    client.POST("/payments", {
      params: { header: { "Idempotency-Key": key } },
      body: request,
      signal: AbortSignal.timeout(timeoutMs),
    });

  const created = await withRetries("create", () => create());
  const payment = expectPayment(created, 201);
  console.log(`payment ${payment.id}: ${payment.status}`);
  if (payment.status !== "succeeded") {
    throw new Refused(`the simulator approves acc_example, got ${payment.status}`);
  }

  // The answer could have been lost on its way: the same request, the same
  // key, gets the stored answer.
  const again = await withRetries("create again", () => create());
  if (
    again.response.headers.get("idempotent-replayed") !== "true" ||
    JSON.stringify(again.data) !== JSON.stringify(created.data)
  ) {
    throw new Refused(`a retry of a finished payment is its replay: ${JSON.stringify(again.data)}`);
  }

  // The same key for another request: refused, nothing charged.
  const mismatch = await create({ ...body, amount: "10.01" });
  if (
    mismatch.response.status !== 409 ||
    mismatch.error?.errorCode !== "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST"
  ) {
    throw new Refused(`another body under the key must be 409, got ${mismatch.response.status}`);
  }
  console.log(`another body under the key: 409 ${mismatch.error.errorCode}`);

  const read = expectPayment(
    await withRetries("read", () =>
      client.GET("/payments/{id}", {
        params: { path: { id: payment.id } },
        signal: AbortSignal.timeout(timeoutMs),
      }),
    ),
    200,
  );
  if (read.id !== payment.id || read.merchantReference !== reference) {
    throw new Refused(`read back another payment: ${JSON.stringify(read)}`);
  }

  const listed = await withRetries("list", () =>
    client.GET("/payments", {
      params: { query: { merchantReference: reference } },
      signal: AbortSignal.timeout(timeoutMs),
    }),
  );
  const ids = listed.data?.data.map((p: Payment) => p.id);
  if (listed.response.status !== 200 || JSON.stringify(ids) !== JSON.stringify([payment.id])) {
    throw new Refused(`listing by merchantReference: expected [${payment.id}], got ${JSON.stringify(listed.data)}`);
  }
  console.log(`read back and listed by merchantReference: ${payment.id}`);
}

main().catch((error: unknown) => {
  console.error(`FAILED: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
