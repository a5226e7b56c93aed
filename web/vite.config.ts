import { defineConfig } from 'vitest/config';
import react from '@vitejs/plugin-react';

// The console is served by the Go binary under /console/ (web/web.go); the
// base must match so that asset URLs resolve there.
export default defineConfig({
  base: '/console/',
  plugins: [react()],
  build: {
    outDir: process.env.CONSOLE_OUT_DIR || 'dist',
    emptyOutDir: true,
    // Reproducible output: the staleness check compares a rebuild with the
    // committed bundle byte for byte.
    sourcemap: false,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 600,
  },
  server: {
    proxy: {
      '/query': { target: process.env.TASKGRAPH_URL || 'http://127.0.0.1:8080', ws: true },
      '/download': { target: process.env.TASKGRAPH_URL || 'http://127.0.0.1:8080' },
    },
  },
  test: {
    environment: 'jsdom',
    globals: true,
    include: ['src/**/*.test.{ts,tsx}'],
    setupFiles: ['src/test-setup.ts'],
  },
});
