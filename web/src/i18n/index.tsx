import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from 'react';
import { en, type MessageKey } from './en';
import { zh } from './zh';

export type Lang = 'en' | 'zh';
export const LANGS: Lang[] = ['en', 'zh'];
const STORAGE_KEY = 'taskgraph.lang';

const dictionaries: Record<Lang, Record<MessageKey, string>> = { en, zh };

export type Vars = Record<string, string | number | null | undefined>;
export type Translate = (key: MessageKey, vars?: Vars) => string;

// format replaces {name} placeholders; unknown placeholders stay visible so
// that a missing variable is noticed rather than silently blank.
export function format(template: string, vars?: Vars): string {
  if (!vars) return template;
  return template.replace(/\{(\w+)\}/g, (m, name: string) => {
    const v = vars[name];
    return v === undefined || v === null ? m : String(v);
  });
}

export function translator(lang: Lang): Translate {
  const dict = dictionaries[lang];
  return (key, vars) => format(dict[key] ?? en[key] ?? key, vars);
}

export function initialLang(): Lang {
  try {
    const saved = localStorage.getItem(STORAGE_KEY);
    if (saved === 'en' || saved === 'zh') return saved;
  } catch {
    // storage disabled: fall through to the browser's language
  }
  return typeof navigator !== 'undefined' && navigator.language?.toLowerCase().startsWith('zh') ? 'zh' : 'en';
}

interface I18n {
  lang: Lang;
  setLang: (l: Lang) => void;
  t: Translate;
  locale: string;
}

// viewerLocale is the locale times and numbers are formatted in: the
// viewer's own (the browser's first language of the console's language,
// so that an en-US viewer reads 12/02/2026 and an en-GB one 02/12/2026),
// else the language's usual one.
export function viewerLocale(lang: Lang, languages: readonly string[] = typeof navigator === 'undefined' ? [] : navigator.languages ?? []): string {
  const mine = languages.find((l) => l.toLowerCase().split('-')[0] === lang);
  if (mine) {
    try {
      return Intl.DateTimeFormat.supportedLocalesOf([mine])[0] ?? mine;
    } catch {
      // a malformed tag: the default below
    }
  }
  return lang === 'zh' ? 'zh-CN' : 'en-GB';
}

const Ctx = createContext<I18n>({ lang: 'en', setLang: () => {}, t: translator('en'), locale: 'en-GB' });

export function I18nProvider({ children, lang: fixed }: { children: ReactNode; lang?: Lang }) {
  const [lang, setLangState] = useState<Lang>(fixed ?? initialLang);
  const setLang = useCallback((l: Lang) => {
    setLangState(l);
    try {
      localStorage.setItem(STORAGE_KEY, l);
    } catch {
      // not persisted; the switch still works for this page
    }
  }, []);
  useEffect(() => {
    document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
  }, [lang]);
  const value = useMemo<I18n>(
    () => ({ lang, setLang, t: translator(lang), locale: viewerLocale(lang) }),
    [lang, setLang],
  );
  return <Ctx.Provider value={value}>{children}</Ctx.Provider>;
}

export function useI18n(): I18n {
  return useContext(Ctx);
}

export type { MessageKey };
