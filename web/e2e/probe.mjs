// The same probe the console sends (src/api/features.ts): it fails variable
// validation when importFile exists, document validation when it does not.
export const IMPORT_PROBE = 'mutation ProbeImport($file: Upload!) { importFile(file: $file, target: "") { id } }';
