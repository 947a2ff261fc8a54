export interface WebhookRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
  /** Bounds the whole attempt: connect, send and the response. */
  timeoutMs: number;
}

export interface WebhookResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** The first `responseBodyBytes` bytes of the body as UTF-8, when the client was asked to keep them. */
  body?: string;
}

/** The only HTTP the dispatcher does: any status the merchant answers resolves; no answer throws. Tests pass a fake. */
export interface WebhookHttpClient {
  post(request: WebhookRequest): Promise<WebhookResponse>;
  close(): void;
}
