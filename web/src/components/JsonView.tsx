export function JsonView({ value, testId }: { value: unknown; testId?: string }) {
  return (
    <pre className="json" data-testid={testId}>
      {value === undefined || value === null ? '—' : JSON.stringify(value, null, 2)}
    </pre>
  );
}
