_wprof() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="wprof"
                ;;
            wprof,attach)
                cmd="wprof__subcmd__attach"
                ;;
            wprof,check)
                cmd="wprof__subcmd__check"
                ;;
            wprof,compare)
                cmd="wprof__subcmd__compare"
                ;;
            wprof,completions)
                cmd="wprof__subcmd__completions"
                ;;
            wprof,doctor)
                cmd="wprof__subcmd__doctor"
                ;;
            wprof,export)
                cmd="wprof__subcmd__export"
                ;;
            wprof,help)
                cmd="wprof__subcmd__help"
                ;;
            wprof,man)
                cmd="wprof__subcmd__man"
                ;;
            wprof,merge)
                cmd="wprof__subcmd__merge"
                ;;
            wprof,probes)
                cmd="wprof__subcmd__probes"
                ;;
            wprof,record)
                cmd="wprof__subcmd__record"
                ;;
            wprof,report)
                cmd="wprof__subcmd__report"
                ;;
            wprof,targets)
                cmd="wprof__subcmd__targets"
                ;;
            wprof__subcmd__help,attach)
                cmd="wprof__subcmd__help__subcmd__attach"
                ;;
            wprof__subcmd__help,check)
                cmd="wprof__subcmd__help__subcmd__check"
                ;;
            wprof__subcmd__help,compare)
                cmd="wprof__subcmd__help__subcmd__compare"
                ;;
            wprof__subcmd__help,completions)
                cmd="wprof__subcmd__help__subcmd__completions"
                ;;
            wprof__subcmd__help,doctor)
                cmd="wprof__subcmd__help__subcmd__doctor"
                ;;
            wprof__subcmd__help,export)
                cmd="wprof__subcmd__help__subcmd__export"
                ;;
            wprof__subcmd__help,help)
                cmd="wprof__subcmd__help__subcmd__help"
                ;;
            wprof__subcmd__help,man)
                cmd="wprof__subcmd__help__subcmd__man"
                ;;
            wprof__subcmd__help,merge)
                cmd="wprof__subcmd__help__subcmd__merge"
                ;;
            wprof__subcmd__help,probes)
                cmd="wprof__subcmd__help__subcmd__probes"
                ;;
            wprof__subcmd__help,record)
                cmd="wprof__subcmd__help__subcmd__record"
                ;;
            wprof__subcmd__help,report)
                cmd="wprof__subcmd__help__subcmd__report"
                ;;
            wprof__subcmd__help,targets)
                cmd="wprof__subcmd__help__subcmd__targets"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        wprof)
            opts="-h -V --help --version attach record probes targets report compare check merge export completions man doctor help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__attach)
            opts="-t -p -q -h --target --all-matches --pid --follow-forks --duration --return --ring-size --quiet --max-calls --skip --interval --snapshots --cpu-sample --off-cpu --per-pid --split-by --aggregate --max-overhead --in-situ --no-calibrate --calibrate-once --keep-preemptions --serve --serve-max-series --out --json --folded --flamegraph --events --trace --pprof --cpu-folded --cpu-flamegraph --cpu-pprof --off-cpu-folded --off-cpu-flamegraph --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --target)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -t)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --duration)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --return)
                    COMPREPLY=($(compgen -W "auto ret-sites uretprobe guarded" -- "${cur}"))
                    return 0
                    ;;
                --ring-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-calls)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --skip)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --snapshots)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-sample)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --split-by)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --aggregate)
                    COMPREPLY=($(compgen -W "event kernel auto" -- "${cur}"))
                    return 0
                    ;;
                --max-overhead)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --serve)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --serve-max-series)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --folded)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flamegraph)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --events)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pprof)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-folded)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-flamegraph)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-pprof)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --off-cpu-folded)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --off-cpu-flamegraph)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__check)
            opts="-h --hypotheses --json --min-calls --confidence --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --hypotheses)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-calls)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --confidence)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__compare)
            opts="-h --by --min-effect --fail-if --tail --json --folded-diff --flamegraph --cpu-flamegraph --off-cpu-flamegraph --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --by)
                    COMPREPLY=($(compgen -W "phase role" -- "${cur}"))
                    return 0
                    ;;
                --min-effect)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fail-if)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tail)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --folded-diff)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flamegraph)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-flamegraph)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --off-cpu-flamegraph)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__completions)
            opts="-h --help bash elvish fish powershell zsh"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__doctor)
            opts="-h --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__export)
            opts="-t -p -o -h --target --all-matches --pid --binary --return --bpftrace --perf-probe --output --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --target)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -t)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --binary)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --return)
                    COMPREPLY=($(compgen -W "auto ret-sites uretprobe guarded" -- "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help)
            opts="attach record probes targets report compare check merge export completions man doctor help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__attach)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__check)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__compare)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__completions)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__doctor)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__export)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__man)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__merge)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__probes)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__record)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__report)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__help__subcmd__targets)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__man)
            opts="-h --dir --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__merge)
            opts="-o -h --output --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__probes)
            opts="-t -p -h --target --all-matches --pid --binary --return --estimate --max-overhead --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --target)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -t)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --binary)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --return)
                    COMPREPLY=($(compgen -W "auto ret-sites uretprobe guarded" -- "${cur}"))
                    return 0
                    ;;
                --estimate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-overhead)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__record)
            opts="-t -q -h --target --all-matches --duration --return --ring-size --quiet --max-calls --skip --interval --snapshots --cpu-sample --off-cpu --per-pid --split-by --aggregate --max-overhead --in-situ --no-calibrate --calibrate-once --keep-preemptions --serve --serve-max-series --out --json --folded --flamegraph --events --trace --pprof --cpu-folded --cpu-flamegraph --cpu-pprof --off-cpu-folded --off-cpu-flamegraph --as-root --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --target)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -t)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --duration)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --return)
                    COMPREPLY=($(compgen -W "auto ret-sites uretprobe guarded" -- "${cur}"))
                    return 0
                    ;;
                --ring-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-calls)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --skip)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --snapshots)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-sample)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --split-by)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --aggregate)
                    COMPREPLY=($(compgen -W "event kernel auto" -- "${cur}"))
                    return 0
                    ;;
                --max-overhead)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --serve)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --serve-max-series)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --folded)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flamegraph)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --events)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pprof)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-folded)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-flamegraph)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-pprof)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --off-cpu-folded)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --off-cpu-flamegraph)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__report)
            opts="-o -h --format --output --tail --first --per-pid --raw --split-by --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --format)
                    COMPREPLY=($(compgen -W "tree json folded svg csv trace cpu-folded cpu-svg offcpu-folded offcpu-svg pprof cpu-pprof" -- "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tail)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --first)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --split-by)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        wprof__subcmd__targets)
            opts="-h --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _wprof -o nosort -o bashdefault -o default wprof
else
    complete -F _wprof -o bashdefault -o default wprof
fi
