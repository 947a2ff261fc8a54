export interface FailureFilter {
  merchantId?: string;
  reference?: string;
  since?: Date;
  until?: Date;
}
