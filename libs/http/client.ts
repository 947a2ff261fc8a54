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
  /** The first `responseBodyBytes` bytes of the body, when the client keeps them. */
  body?: string;
}

/** Any status the merchant answers resolves; no answer throws. */
export interface WebhookHttpClient {
  post(request: WebhookRequest): Promise<WebhookResponse>;
  close(): void;
}
