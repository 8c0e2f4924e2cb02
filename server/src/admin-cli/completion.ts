/**
 * Shell completion for `capstan`, made from the command tree itself so that it never lags a new
 * verb: `capstan completion bash` / `capstan completion zsh` print a script to source. Completes
 * verbs and options; values (node ids…) are left to the shell's defaults.
 */
import type { Command } from 'commander';

/** Each command path (`""`, `"nodes"`, `"nodes list"`) with its subcommands and long options. */
export function commandTable(program: Command): Array<{ path: string; words: string[] }> {
  const out: Array<{ path: string; words: string[] }> = [];
  const walk = (cmd: Command, path: string[], inherited: string[]) => {
    const own = cmd.options.map((o) => o.long).filter((l): l is string => !!l);
    const opts = [...inherited, ...own];
    out.push({ path: path.join(' '), words: [...cmd.commands.map((c) => c.name()), ...opts, '--help'] });
    for (const c of cmd.commands) walk(c, [...path, c.name()], path.length === 0 ? own : inherited);
  };
  walk(program, [], []);
  return out;
}

export function bashCompletion(program: Command): string {
  const cases = commandTable(program).map(({ path, words }) => `    ${JSON.stringify(path)}) words=${JSON.stringify(words.join(' '))} ;;`).join('\n');
  return `# capstan bash completion: source <(capstan completion bash)
_capstan() {
  local cur=\${COMP_WORDS[COMP_CWORD]} path="" w i words
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=\${COMP_WORDS[i]}
    case "$w" in -*) continue ;; esac
    case " $(_capstan_words "\${path# }") " in *" $w "*) path="$path $w" ;; esac
  done
  words=$(_capstan_words "\${path# }")
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
_capstan_words() {
  local words=""
  case "$1" in
${cases}
  esac
  printf '%s' "$words"
}
complete -o default -F _capstan capstan
`;
}

export function zshCompletion(program: Command): string {
  const cases = commandTable(program).map(({ path, words }) => `    ${JSON.stringify(path)}) words=(${words.join(' ')}) ;;`).join('\n');
  return `#compdef capstan
# capstan zsh completion: capstan completion zsh > "\${fpath[1]}/_capstan", or source <(capstan completion zsh)
_capstan() {
  local path_="" w i
  local -a known
  for ((i = 2; i < CURRENT; i++)); do
    w=\${words[i]}
    [[ $w == -* ]] && continue
    known=(\${(z)$(_capstan_words "\${path_# }")})
    (( \${known[(Ie)$w]} )) && path_="$path_ $w"
  done
  local -a candidates
  candidates=(\${(z)$(_capstan_words "\${path_# }")})
  compadd -- $candidates
}
_capstan_words() {
  local -a words
  case "$1" in
${cases}
  esac
  print -r -- "\${words[*]}"
}
compdef _capstan capstan
`;
}
