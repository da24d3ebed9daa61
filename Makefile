# Build and install carma on a GPU server (README: "Installing on a GPU
# server").
#
#   make                      release build (cargo build --release)
#   sudo make install         binaries (carma and its carma-supervise), unit,
#                             tmpfiles entry, sample config (kept if
#                             present), completions, man pages
#   sudo make uninstall       all of that but the configuration
#
# PREFIX=/usr for a distribution package; DESTDIR=/some/root to stage the
# files instead of installing them; CARMA=path/to/carma to install a binary
# built elsewhere (with the carma-supervise built beside it). Completions and man pages come from that binary
# (`carma completions`, `carma man`), so they match it. systemd reads units
# and tmpfiles entries from /usr/local/lib as well as /usr/lib.

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
# The binary reads /etc/carma/carma.toml whatever the prefix.
SYSCONFDIR ?= /etc
CARGO ?= cargo
CARMA ?= target/release/carma
CARMA_SUPERVISE ?= $(dir $(CARMA))carma-supervise

BASH_COMPLETIONS = $(DATADIR)/bash-completion/completions/carma
ZSH_COMPLETIONS = $(DATADIR)/zsh/site-functions/_carma
FISH_COMPLETIONS = $(DATADIR)/fish/vendor_completions.d/carma.fish

.PHONY: all install uninstall

all:
	$(CARGO) build --release

install:
	@test -x "$(CARMA)" || { echo "no $(CARMA): run make (or pass CARMA=path/to/carma)" >&2; exit 1; }
	install -Dm755 "$(CARMA)" "$(DESTDIR)$(BINDIR)/carma"
	@if [ -x "$(CARMA_SUPERVISE)" ]; then \
		echo "install -Dm755 $(CARMA_SUPERVISE) $(DESTDIR)$(BINDIR)/carma-supervise"; \
		install -Dm755 "$(CARMA_SUPERVISE)" "$(DESTDIR)$(BINDIR)/carma-supervise"; \
	else \
		echo "no $(CARMA_SUPERVISE): runs will be supervised by carma supervise" >&2; \
	fi
	install -d "$(DESTDIR)$(UNITDIR)"
	sed 's|/usr/local/bin/carma|$(BINDIR)/carma|' systemd/carma.service \
		> "$(DESTDIR)$(UNITDIR)/carma.service"
	chmod 644 "$(DESTDIR)$(UNITDIR)/carma.service"
	install -Dm644 systemd/carma.conf "$(DESTDIR)$(TMPFILESDIR)/carma.conf"
	@if [ -e "$(DESTDIR)$(SYSCONFDIR)/carma/carma.toml" ]; then \
		echo "kept $(DESTDIR)$(SYSCONFDIR)/carma/carma.toml"; \
	else \
		echo "install -Dm644 examples/carma.toml $(DESTDIR)$(SYSCONFDIR)/carma/carma.toml"; \
		install -Dm644 examples/carma.toml "$(DESTDIR)$(SYSCONFDIR)/carma/carma.toml"; \
	fi
	install -d "$(DESTDIR)$(dir $(BASH_COMPLETIONS))" "$(DESTDIR)$(dir $(ZSH_COMPLETIONS))" \
		"$(DESTDIR)$(dir $(FISH_COMPLETIONS))" "$(DESTDIR)$(MANDIR)/man1" \
		"$(DESTDIR)$(MANDIR)/man5"
	"$(CARMA)" completions bash > "$(DESTDIR)$(BASH_COMPLETIONS)"
	"$(CARMA)" completions zsh > "$(DESTDIR)$(ZSH_COMPLETIONS)"
	"$(CARMA)" completions fish > "$(DESTDIR)$(FISH_COMPLETIONS)"
	"$(CARMA)" man "$(DESTDIR)$(MANDIR)/man1"
	"$(CARMA)" man --rad "$(DESTDIR)$(MANDIR)/man5"

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/carma" "$(DESTDIR)$(BINDIR)/carma-supervise" \
		"$(DESTDIR)$(UNITDIR)/carma.service" \
		"$(DESTDIR)$(TMPFILESDIR)/carma.conf" "$(DESTDIR)$(BASH_COMPLETIONS)" \
		"$(DESTDIR)$(ZSH_COMPLETIONS)" "$(DESTDIR)$(FISH_COMPLETIONS)" \
		"$(DESTDIR)$(MANDIR)"/man1/carma.1 "$(DESTDIR)$(MANDIR)"/man1/carma-*.1 \
		"$(DESTDIR)$(MANDIR)"/man5/carma-rad.5
