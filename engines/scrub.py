"""Leave secrets out of text before it goes to a summariser or into a memory.

Everything here is a plain regex pass with bounded or single-pass quantifiers, so a 5 MB paste
costs a few linear scans and nothing can backtrack catastrophically. The rules err on the side
of leaving a secret out, but they leave ordinary long words, URLs without credentials, git SHAs,
checksums and UUIDs alone: those are facts a person wants kept. A UUID or hex string named as a
key or token ("my azure key is 3f9a…") is taken, though.

What counts as a secret: API keys and tokens of known shapes (the prefixes well-kept secret
scanners such as gitleaks use), keys and passwords in assignments, headers, URLs of any scheme
(``redis://:pw@host``), command lines (``mysql -p…``, ``sshpass -p``, ``curl -u``) and netrc
lines, a password said in a sentence either way round ("my password is …", "… as my password",
"mein Passwort ist …", "mon mot de passe est …", and Spanish, Italian, Portuguese, Dutch and
Polish), a long random value named as a key, token, secret or password, private key blocks,
password hashes (htpasswd, crypt), TOTP seeds, wallet recovery phrases (any case, commas or
not), long random tokens, and numbers that are secrets by themselves: card numbers (Luhn; spaced,
dashed or dotted), IBANs (any case; country length and mod 97) and US social security numbers.
Check digits keep order numbers from being taken; phone numbers are kept (they name a contact,
they do not open anything), and so are prices, dates and version numbers.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections import Counter
from collections.abc import Callable
from itertools import pairwise

from engines.resources import resources_dir

log = logging.getLogger("conch.scrub")

MARKER = "[secret left out]"

# --- keys with a known shape ------------------------------------------------------------------

# Each starts only where a token starts (a lookbehind on the token alphabet), so a long run of
# look-alike characters is tried once, not from every position inside it.
_T = r"A-Za-z0-9_\-"  # the alphabet most API keys use
_KEYS = re.compile(
    # One lookbehind for all: a key starts only where a token starts.
    rf"(?<![{_T}])(?:"
    + "|".join(
        (
            rf"sk-(?:proj-|ant-(?:api\d\d-)?|or-(?:v1-)?|svcacct-|admin-)?[{_T}]{{16,}}",
            r"gh[pousr]_[A-Za-z0-9]{20,}",
            r"github_pat_[A-Za-z0-9_]{20,}",
            rf"glpat-[{_T}]{{20,}}",
            r"gsk_[A-Za-z0-9]{20,}",
            r"xai-[A-Za-z0-9]{20,}",
            r"hf_[A-Za-z0-9]{20,}",
            rf"AIza[{_T}]{{30,}}",
            rf"GOCSPX-[{_T}]{{20,}}",  # Google OAuth client secret
            rf"ya29\.[{_T}]{{20,}}",  # Google OAuth access token
            rf"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{{16}}(?![{_T}])",
            r"(?:xoxe\.)?xox[abposre]-[A-Za-z0-9\-]{10,}",
            r"xapp-\d-[A-Za-z0-9\-]{10,}",
            r"[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}",
            r"whsec_[A-Za-z0-9]{24,}",  # Stripe webhook signing secret
            # Twilio account and API key ids: two letters and 32 hex digits
            rf"(?:AC|SK)[0-9a-fA-F]{{32}}(?![{_T}])",
            # Azure: an Entra ID client secret, and the 84-character keys that carry "JQQJ9"
            r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}",
            r"[A-Za-z0-9]{52}JQQJ9[9DH][A-Za-z0-9]{26}(?:[A-Za-z0-9]{2}==)?",
            r"dop_v1_[a-f0-9]{64}",  # DigitalOcean
            r"dapi[a-f0-9]{32}",  # Databricks
            r"r8_[A-Za-z0-9]{30,}",  # Replicate
            r"pplx-[A-Za-z0-9]{30,}",  # Perplexity
            r"lin_api_[A-Za-z0-9]{30,}",  # Linear
            rf"ATATT3[{_T}=]{{30,}}",  # Atlassian
            r"api_org_[A-Za-z0-9]{20,}",  # Hugging Face organisation
            r"key-[0-9a-f]{32}(?![A-Za-z0-9])",  # Mailgun
            rf"\d{{8,10}}:AA[{_T}]{{30,40}}",  # Telegram bot
            r"AGE-SECRET-KEY-1[0-9A-Z]{58}",
            # JSON web tokens: three base64url parts, the first two JSON
            rf"eyJ[{_T}]{{8,}}\.eyJ[{_T}]{{8,}}\.[{_T}]{{8,}}",
            # Discord bot and user tokens: the account id in base64, a time, an HMAC
            rf"[MNO][{_T}]{{23,27}}\.[{_T}]{{6,7}}\.[{_T}]{{27,40}}",
            r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64}",  # SendGrid
            r"npm_[A-Za-z0-9]{36}",
            r"pypi-AgE[A-Za-z0-9_\-]{50,}",
            r"shpat_[a-fA-F0-9]{32}",  # Shopify
        )
    )
    + ")"
)

# --- headers and assignments ------------------------------------------------------------------

_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9])(bearer|token)(\s+)([A-Za-z0-9._~+/=\-]{8,})")

_AUTH_HEADER = re.compile(
    r"(?i)(?<![A-Za-z0-9_\-])((?:proxy-)?authorization|x-api-key|api-key|x-auth-token)"
    r"(\"?\s*[:=]\s*\"?)"
    r"(?:(basic|bearer|digest|token|bot|apikey|key)(\s+))?"
    r"([A-Za-z0-9._~+/=\-]{6,})"
)

# Names whose value is a secret. The name may be the tail of a longer identifier
# (OPENAI_API_KEY, db_password) but must end there (max_tokens is not a token).
_SECRET_NAME = (
    r"(?:passwords?|passwd|pwd|pw|passphrase|pass|secret|client[_-]?secret|secret[_-]?key"
    r"|api[_-]?key|apikey|access[_-]?key|access[_-]?token|auth[_-]?token|refresh[_-]?token"
    r"|id[_-]?token|session[_-]?token|token|private[_-]?key|credentials?"
    r"|account[_-]?key|shared[_-]?access[_-]?key|subscription[_-]?key|sas[_-]?token"
    r"|master[_-]?key|signing[_-]?key|encryption[_-]?key|app[_-]?secret|consumer[_-]?secret"
    r"|passwort|kennwort|contrase[ñn]a|senha|wachtwoord|has[łl]o|mdp)"
)
# A name starts after a non-letter or inside a camelCase identifier (openaiApiKey), and only
# where an identifier followed by ":" or "=" starts: a cheap look ahead before the names.
_NAME_START = (
    r"(?:(?<![A-Za-z0-9])|(?-i:(?<=[a-z0-9])(?=[A-Z])))"
    r"(?=[A-Za-z0-9_\-.ñńłŁ]{2,90}[\"']?[ \t]{0,8}[:=])"
)
_ASSIGN = re.compile(
    r"(?i)" + _NAME_START + r"((?:[A-Za-z0-9]{1,40}[_\-.])?" + _SECRET_NAME + r")(?![A-Za-z0-9])"
    r"([\"']?[ \t]{0,8}(?::=|=>|[:=])[ \t]{0,8})"
    r"(?:\"([^\"\r\n]{1,300})\"|'([^'\r\n]{1,300})'|([^\s\"'`,;()\[\]{}<>]{1,300}))"
)
# What "password" is called, in English and the languages people most often write to Conch in;
# German and Dutch also glue it to what it is for (WLAN-Passwort, Routerpasswort).
_PW_NAMES = (
    r"passwords?|passwd|passphrase|passcode|pin|pw|pwd|mdp"
    r"|passw[oö]rt(?:er)?|kennw[oö]rt(?:er)?|wachtwoord(?:en)?"
    r"|mots?[ \t]+de[ \t]+passe|contrase[ñn]as?|senhas?|palavras?-passe"
    r"|parola[ \t]+d['’]ordine|has[łl]o|l[öo]senord|adgangskode|passord|salasana|heslo"
    r"|[şs]ifre(?:m|si)?|jelsz[óo]"
)
# "for the router", "für das WLAN", "du wifi", "de mi correo", "van de router", "do banku"
_PW_FOR = (
    r"(?:for|to|of|on|für|fur|zum|zur|vom|von|des|du|de|pour|del|della|dello|do|da|dos|das"
    r"|van|voor|dla|na|til|för)"
)
_PW_ARTICLES = (
    r"the|my|our|your|this|that|his|her|their|das|die|der|den|dem|mein|meine|meinen|meinem"
    r"|unser|unsere|le|la|les|l'|mon|ma|notre|el|mi|nuestro|il|lo|mio|mia|o|a|meu|minha|het"
    r"|mijn|moje|mojego|mojej|min|mitt|a[ \t]+minha|o[ \t]+meu|la[ \t]+mia|il[ \t]+mio"
)
_PW_ARTICLE = "(?:" + _PW_ARTICLES + ")"
# "is" and ":" in those languages
_PW_IS = (
    r"(?:is|was|are|were|ist|lautet|war|est|c['’]est|était|etait|es|era|è|é|jest|to|är|er|je|=)"
)
_PW_VERB = r"(?:[ \t]+" + _PW_IS + r"(?:[ \t]*:)?|[ \t]*[:=]|['’]s)"
_PW_VALUE = r"(\"[^\"\r\n]{1,200}\"|'[^'\r\n]{1,200}'|[^\s\"'`,;()\[\]{}<>]{1,200})"
# "my password is hunter2", "the wifi password is 'swordfish'", "password for the router is
# admin123", "password hunter2", "mein Passwort ist …", "le mot de passe du wifi est …", and
# netrc's "machine … login … password …". Prose ("the password is required") is told apart in
# _sub_password_said.
_PW_HEAD = (
    r"(?i)(?:(?<![A-Za-z0-9_])(" + _PW_NAMES + r")"
    r"|(?<=[a-zäöüß])(passw[oö]rt|kennw[oö]rt|wachtwoord))"
)
_PASSWORD_SAID = re.compile(
    _PW_HEAD + r"((?:[ \t]+" + _PW_FOR + r"(?:[ \t]+" + _PW_ARTICLE + r")?"
    r"(?:[ \t]+[^\s\"'`,;()\[\]{}<>]{1,60}){1,2}"
    + _PW_VERB
    + r"|"
    + _PW_VERB
    + r")?[ \t]+)"
    + _PW_VALUE
)
# The same without the "for the router" part, tried where that part read a word too many
# ("hasło to Roma1944" is Polish "is", not "to").
_PASSWORD_SAID_SHORT = re.compile(_PW_HEAD + r"(" + _PW_VERB + r"?[ \t]+)" + _PW_VALUE)
# The other way round: "hunter2 is my password", "I use X as my password", "X ist mein
# Passwort", "X comme mot de passe", "X como contraseña", "X jako hasło" - unless the name is
# part of a longer one, so "Bitwarden is my password manager" stays.
_PW_COMPOUND = (
    r"managers?|fields?|box|hints?|reset|resets|policy|policies|prompt|generator|vault|apps?"
    r"|strength|rules?|change|hash|hashes|files?|protection|protected|requirements?|length"
    r"|entry|dialog|form|input|list|store|safe|keeper|page|screen|recovery|expiry|expiration"
    r"|history|complexity|section|settings?|options?|check|checker|cracker|login|sharing|spray"
    r"|storage|database|leak|breach|dump|salt|questions?|game|less|word"
)
_PASSWORD_BEFORE = re.compile(
    r"(?i)(?<![\w\-/@+=])" + _PW_VALUE + r"([ \t]+(?:as|is|was|als|ist|war|comme|est|como|es"
    r"|come|è|é|jako|to|for|für|pour|para|per|voor)"
    r"(?:[ \t]+(?:" + _PW_ARTICLES + r"|new|neues|neue|nouveau|nuevo|nueva|nuovo|nuova"
    r"|novo|nova|nieuw|nieuwe|nowe|nowym)){0,3}[ \t]+(?:" + _PW_NAMES + r"))"
    r"(?![\w\-])(?![ \t]+(?:" + _PW_COMPOUND + r")(?![\w]))"
)
_PASSWORD_WORDS = {
    "password",
    "passwords",
    "passwd",
    "pwd",
    "pw",
    "pass",
    "passphrase",
    "pin",
    "passwort",
    "kennwort",
    "contraseña",
    "contrasena",
    "senha",
    "wachtwoord",
    "hasło",
    "haslo",
    "mdp",
}
_VERB = re.compile(r"(?i)(?<![\w])" + _PW_IS + r"(?![\w])|[=:]|['’]s(?![\w])")
# netrc names the password right after the login (or the machine), on its line or the one above
_NETRC_BEFORE = re.compile(r"(?i)(?<![A-Za-z0-9])(?:login|machine|account)[ \t]+\S{1,200}[ \t]+$")
_NETRC_ABOVE = re.compile(r"(?i)^[ \t]*(?:login|machine|account)[ \t]+\S{1,200}[ \t]*\r?\n$")
# Words that follow "password is" in prose, not in a sentence that gives the password away
# (English, then German, French, Spanish, Italian, Portuguese, Dutch, Polish).
_PROSE_WORDS = """
    a an the this that it its my your our their his her not no none null nil empty blank unset
    set missing required optional needed mandatory incorrect correct wrong right invalid valid
    expired weak strong secure insecure safe unsafe too very so quite also still now then just
    only never always usually already same different new old long short good bad fine ok okay
    known unknown hidden visible case sensitive stored saved kept changed reset sent shown
    hashed encrypted protected locked forgotten lost stolen leaked compromised used given
    provided entered typed generated managed asked requested accepted rejected ignored
    what which where when how why who there here in on at for from of to and or but if with
    without by as into via under over about within between before after being been be
    something anything nothing everything same mine yours ours theirs his hers secret
    one two three four five six seven eight nine ten twelve
    str int bytes bool string float any optional list dict text secretstr
    ein eine einen nicht kein keine falsch richtig erforderlich notwendig abgelaufen
    geändert vergessen sicher unsicher leer zu kurz lang geheim gültig ungültig neu alt
    un une le la les pas mon ton son faux incorrect requis obligatoire expiré oublié changé
    vide trop court long sûr valide invalide nouveau secret
    una el no mi tu su incorrecta correcta obligatoria requerida olvidada segura vacía
    demasiado corta larga nueva secreta inválida válida
    non il lo mio sbagliata corretta obbligatoria richiesta scaduta dimenticata errata
    vuota troppo corta lunga nuova segreta valida
    um uma não meu minha incorreta correta obrigatória expirada esquecida fraca forte vazia
    muito curta longa nova secreta inválida
    een het de niet geen mijn onjuist juist verplicht vereist verlopen vergeten leeg te
    kort lang nieuw geheim ongeldig geldig
    nie jest moje nieprawidłowe prawidłowe wymagane błędne puste za zbyt krótkie długie
    nowe tajne
    """
_PROSE_AFTER_PASSWORD = frozenset(_PROSE_WORDS.split()) | {
    w for w in _PW_ARTICLES.split("|") if w.isalpha()
}

# Command lines that carry a password: mysql -pSECRET, sshpass -p SECRET, curl -u user:SECRET
_VALUE = r"(\"[^\"\r\n]{1,200}\"|'[^'\r\n]{1,200}'|[^\s\"'\[][^\s\"']{0,199})"
# The words between the command and -p are whole options and arguments (none starts with -p),
# a bounded number of them, so nothing can backtrack far.
_ARGS = r"(?:[ \t]+(?:-[^p\s]\S{0,80}|[^\s\-]\S{0,80})){0,10}[ \t]+"
_MYSQL_P = re.compile(
    r"(?<![\w\-])((?:mysql(?:dump|admin|import|show|check|pump|sh)?|mariadb(?:-dump|-admin)?)"
    + _ARGS
    + r"-p)"  # glued: "-p" alone makes mysql ask for the password
    + _VALUE
)
_SSHPASS = re.compile(r"(?<![\w\-])(sshpass" + _ARGS + r"-p[ \t]*)" + _VALUE)
_CURL_USER = re.compile(r"(?<![\w\-])((?:-u|--user)[ \t]+[\"']?[^\s:\"']{1,100}:)([^\s\"']{1,200})")

# Password hashes can be cracked: htpasswd and shadow lines, crypt(3) and LDAP forms
_CRYPT = re.compile(
    r"(?<![\w$])\$(?:2[abxy]?|apr1|1|5|6|y|gy|7|sha1|md5|argon2(?:id|i|d))\$[A-Za-z0-9./$=,+\-]{16,400}"
    r"|(?<![\w{])\{S?SHA(?:256|512)?\}[A-Za-z0-9+/]{20,200}={0,2}"
)

# Webhook URLs whose last part is the key to post as the owner
_WEBHOOK = re.compile(
    r"(https://(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api/webhooks/\d{5,30}/"
    r"|https://hooks\.slack\.com/(?:services|workflows)/(?:[A-Za-z0-9]{6,20}/){1,3})"
    r"([A-Za-z0-9_\-]{16,200})"
)

# TOTP (authenticator) seeds: an otpauth:// link, or base32 just after a word that names one.
# The base32 is found first and its words looked for before it: "secret" is common, seeds are not.
_OTPAUTH = re.compile(r"(?i)(?<![\w-])otpauth(?:-migration)?://[^\s\"'<>`]{1,3000}")
_BASE32 = re.compile(
    r"(?<![A-Za-z0-9])(?:[A-Za-z2-7]{4}(?:[ ][A-Za-z2-7]{4}){3,15}|[A-Za-z2-7]{16,128})=*"
    r"(?![A-Za-z0-9])"
)
_TOTP_WORDS = re.compile(
    r"(?i)(?<![A-Za-z0-9])(?:totp|2fa|two[- ]factor|mfa|otp|authenticator|setup key|seed"
    r"|secret|recovery key)(?![A-Za-z0-9])"
)

# Numbers that are secrets by themselves. Card numbers: 13-19 digits, alone or grouped in
# fours (Amex 4-6-5); IBANs: a country, two check digits and up to 30 letters and digits; US
# social security numbers: 3-2-4 digits (bare 9 digits only when named).
_CARD = re.compile(
    # not the digits after an IBAN's country and check digits ("de89 3704 0044 …")
    r"(?<![\w.,/+\-])(?<!(?<![A-Za-z0-9])[A-Za-z]{2}\d{2}[ \u00a0.\-])"
    r"(?:\d{4}(?:[ \u00a0.\-]\d{4}){2,3}(?:[ \u00a0.\-]\d{1,3})?"
    r"|\d{4}[ \u00a0.\-]\d{6}[ \u00a0.\-]\d{4,5}|\d{13,19})"
    r"(?![\w/\-]|[.,]\d)"
)
# Any case, grouped by spaces, dashes or dots; the country and its IBAN length are checked too.
_IBAN = re.compile(
    r"(?i)(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[ \u00a0.\-]?[A-Z0-9]){11,32}(?![A-Za-z0-9])"
)
# ISO 13616: each country's IBAN length (SWIFT's IBAN registry)
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22,
    "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32,
    "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31,
    "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28, "TL": 23,
    "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip
_SSN = re.compile(r"(?<![\w\-])(\d{3})-(\d{2})-(\d{4})(?![\w\-])")
_SSN_NAMED = re.compile(
    r"(?i)(?<![A-Za-z0-9])(ssn|social security(?: number| no\.?)?)"
    r"([^\w\r\n]{0,6}(?:(?:is|was)[ \t]+)?)(\d{3})[ \-]?(\d{2})[ \-]?(\d{4})(?!\d)"
)

# Twelve or more words in a row from the list recovery phrases are made of (BIP-0039), each
# perhaps numbered ("1. abandon 2. ability …"). Most of the list is ordinary words, but prose
# never goes twelve words without "the", "a", "to", "and" or another word that is not on it.
_WORD_RUN = re.compile(
    r"(?<![\w'’\-])(?:\d{1,2}[.):][ \t]*+)?[A-Za-z]{3,8}"
    r"(?:[ \t]*+[,;]?[ \t]*+(?:\r?\n[ \t]*+)?(?<=[\s,;])(?:\d{1,2}[.):][ \t]*+)?[A-Za-z]{3,8})"
    r"{11,}(?![\w'’\-])"
)
_SEED_WORDS = 12

# user:password@host inside a URL
# (the user may be empty, as in redis://:pw@host; the password runs to the last "@")
_URL_CREDENTIALS = re.compile(
    r"(?<=://)([^\s:/@]{0,200}:)([^\s/]{1,200})(@)(?=[^\s/@]{0,255}(?:[/?#\s]|$))"
)

# --- private keys -----------------------------------------------------------------------------

_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
# A block cut short: its header lines and base64 lines, up to the first line of anything else
_PEM_BODY = re.compile(
    r"(?:\r?\n[ \t]*(?:[A-Za-z0-9+/=]{4,}|[A-Za-z\-]{1,30}:[^\r\n]{0,200})[ \t]*(?=\r?\n|$))*"
)

# --- long random tokens -----------------------------------------------------------------------

_RUN = re.compile(r"(?<![A-Za-z0-9_\-+=])[A-Za-z0-9_\-+=]{32,}")
# Base64 of 40 characters or more: an AWS secret access key (40), an Azure storage key (88)
_B64 = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40,}={0,2}(?![A-Za-z0-9/+=])")
_HEX = re.compile(r"[0-9a-fA-F\-]+")
_PIECES = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
# The letter pairs that make up 98% of those in English-ish technical text (counted once over
# the Python standard library's words). Words and identifiers are built of them; random keys
# are mostly built of the other ~400 pairs.
_COMMON_PAIRS = frozenset(
    re.findall(
        "..",
        "abacadafagaiakalamanaparasatauavawaxaybabcbebibjblbobrbsbubycacccechcickclcmcocrcsctcucy"
        "dadddedidldodpdrdsdtdudyeaebecedeeefegeielemeneoepeqeresetevewexeyfafefffiflfofrftfugage"
        "ggghgiglgngrgsguhahehihohrhtiaibicidieifigiliminioipirisitivixizjejokekikskwlaldlelflill"
        "lolplsltlulymambmdmemimmmompmsmunancndnenfngninknlnnnonpnsntnunvnyoaobocodofogoiokolomon"
        "oooporosotouovowoxpapdpepiplpoppprpsptpupyqurarcrdrergrirkrlrmrnrorrrsrtrurvrysascsesfsg"
        "shsiskslsmsospssstsusytatctdtetfthtitltmtotptrtstttutwtyuaubucudueufuguiulumunupurusutva"
        "veviwawewhwiwnwowrwsxaxcxexixpxtyiynyoypyrysytze",
    )
)


def _wordlike(piece: str) -> bool:
    """A run of letters that reads like (part of) a word rather than random letters."""
    if len(piece) < 3:
        return False
    low = piece.lower()
    if not any(c in "aeiouy" for c in low):
        return False
    pairs = [low[i : i + 2] for i in range(len(low) - 1)]
    return sum(p in _COMMON_PAIRS for p in pairs) / len(pairs) >= 0.75


def _entropy(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def looks_random(token: str, *, min_len: int = 32) -> bool:
    """True for a string that reads like a generated key rather than words, a hash or an id."""
    core = token.strip("=-_")
    if len(core) < min_len:
        return False
    if not any(c.isdigit() for c in core) or not any(c.isalpha() for c in core):
        return False
    # Hex is a digest or an id (git SHA, sha256, UUID, MD5): facts, not secrets. A hex key in
    # an assignment ("api_key = 3f9a...") is still caught by the assignment rule.
    if _HEX.fullmatch(core):
        return False
    wordy = sum(len(p) for p in _PIECES.findall(core) if _wordlike(p))
    if wordy / len(core) >= 0.45:
        return False
    # An alphabet or a counting run ("abcdef...0123456789") is a table, not a key.
    steps = sum(ord(b) - ord(a) == 1 for a, b in pairwise(core))
    if steps / len(core) > 0.5:
        return False
    return _entropy(core) >= 3.6


# --- the passes -------------------------------------------------------------------------------


def _sub_pem(text: str) -> str:
    if "PRIVATE KEY" not in text:
        return text
    out: list[str] = []
    pos = 0
    no_more_ends = False
    while True:
        begin = _PEM_BEGIN.search(text, pos)
        if begin is None:
            break
        end = None if no_more_ends else _PEM_END.search(text, begin.end())
        if end is None:
            # Once an END is missing it is missing for every later BEGIN too: never rescan.
            no_more_ends = True
            body = _PEM_BODY.match(text, begin.end())
            stop = body.end() if body else begin.end()
        else:
            stop = end.end()
        out.append(text[pos : begin.start()])
        out.append(MARKER)
        pos = stop
    out.append(text[pos:])
    return "".join(out)


# Values after "password:" that are code (a type, a constant), not a password
_NOT_A_PASSWORD = frozenset(
    {"none", "null", "true", "false", "required", "str", "int", "bytes", "bool", "string"}
    | {"float", "any", "optional", "text", "secretstr"}
)


# A name in code: self.kv_per_token, settings.api_key, CLOUD_KEY
_CODE_VALUE = re.compile(
    r"[A-Za-z_]\w{0,60}(?:\.[A-Za-z_]\w{0,60}){1,5}|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"
)


def _sub_assign(m: re.Match[str]) -> str:
    name, sep = m.group(1), m.group(2)
    value = m.group(3) or m.group(4) or m.group(5) or ""
    if value.startswith(MARKER):
        return m.group(0)
    following = m.string[m.end() : m.end() + 1]
    if m.group(5) is not None and following in ("(", "[", "."):
        return m.group(0)  # code that reads a secret (os.environ["KEY"]), not the secret itself
    base = re.split(r"[_\-.]", name.lower())[-1]
    if base in _PASSWORD_WORDS or "pass" in base:
        if len(value) < 3 or value.lower() in _NOT_A_PASSWORD:
            return m.group(0)
    elif len(value) < 8 or value.replace(" ", "").isalpha():
        return m.group(0)  # keys have digits; "secret: keep it simple" is prose
    elif m.group(5) is not None and _CODE_VALUE.fullmatch(value):
        return m.group(0)  # api_key=server.api_key, api_key=CLOUD_KEY: code, not the key
    quote = '"' if m.group(3) is not None else "'" if m.group(4) is not None else ""
    return f"{name}{sep}{quote}{MARKER}{quote}"


def _in_netrc(m: re.Match[str]) -> bool:
    """True when the password word at ``m`` is in a netrc entry (machine … login … password)."""
    text = m.string
    start, end = _line_before(m, 400)
    if _NETRC_BEFORE.search(text, start, end):
        return True
    if start == 0 or text[start - 1] != "\n" or text[start:end].strip():
        return False
    # "password …" on a line of its own, below "login alice"
    low = max(0, start - 400)
    newline = text.rfind("\n", low, start - 1)
    return _NETRC_ABOVE.match(text[newline + 1 if newline >= 0 else low : start]) is not None


def _prose(word: str) -> bool:
    """A word that follows "password is" in a sentence about passwords, not one giving it away."""
    if not word.isalpha():
        return False
    low = word.lower()
    return low in _PROSE_AFTER_PASSWORD or low.endswith(("ed", "ing", "ly", "able", "ible"))


_NOT_STRONG = re.compile(
    r"[\d\-./:,]*[\-./:,][\d\-./:,]*(?:\.[A-Za-z]{1,4})?"  # 2026-11-30, 12.50, v1.2 file.md
    r"|[\w\-.]{1,80}\.(?:md|txt|pdf|docx?|xlsx?|csv|json|ya?ml|py|js|html?|png|jpe?g|zip)"
    r"|[\w.+\-]{1,64}@[\w\-]{1,63}(?:\.[\w\-]{1,63})+\.?"  # an email address
)


def _strong(value: str) -> bool:
    """A word that reads like a password even with nothing saying so: a digit, a symbol in a
    long word, or a capital inside it ("hunter22", "Qz!kLp#m", "CorrectHorse"); not a date, an
    amount, a file name or an address ("passwd 2026-11-30.md", "password to bob@example.com")."""
    if _NOT_STRONG.fullmatch(value):
        return False
    if any(c.isdigit() for c in value):
        return True
    if len(value) >= 6 and any(c in "!@#$%^&*?~+=_|" for c in value):
        return True
    return re.search(r"[a-zäöüéèàç][A-ZÄÖÜÉ]", value) is not None


def _said(name: str, sep: str) -> bool:
    """Whether ``sep`` says "is" (or ":"); Polish "to" counts only after a Polish name."""
    verbs = [v.group(0).lower().replace("’", "'") for v in _VERB.finditer(sep)]
    if verbs == ["to"]:
        return name.lower() in ("hasło", "haslo")
    # "password's" is as often "the password's strength" as "the password is": judged as unsaid
    return bool(verbs) and verbs != ["'s"]


def _password_said(m: re.Match[str]) -> str | None:
    name, sep, value = m.group(1) or m.group(2), m.group(3), m.group(4)
    if value.startswith(("[secret", MARKER)):
        return None
    quoted = value[0] in "\"'"
    core = value[1:-1] if quoted else value.rstrip(".,;:")
    trail = "" if quoted else value[len(core) :]
    after = m.string[m.end() : m.end() + len(MARKER)]
    if not quoted and after[:1] in ("(", "[", ".") and after != MARKER:
        return None  # code: password = unquote(password), password: Optional[bytes]
    if not any(c.isalnum() for c in core):
        return None
    if not (name.lower() in ("password", "passwd") and _in_netrc(m)):
        said = _said(name, sep)
        words = sep.lower().split()
        if name.lower() in ("hasło", "haslo") and len(words) > 1 and words[0] == "to":
            return None  # Polish "to" is "is": the shorter reading is tried next
        if not said and sep.strip().lower() == "to":
            return None  # "send the password to bob", "the password to the shed"
        # Judged without a sentence's "!" or "?", which are hidden with it all the same.
        word = core if quoted else core.rstrip("!?")
        if len(word) < 3 or (not said and name.lower() == "pin"):
            return None
        if quoted:
            pass
        elif said and _prose(word):
            return None  # "the password is required"
        elif not said and not _strong(word):
            return None  # "password manager", "password and/or user name"
    hidden = f"{value[0]}{MARKER}{value[-1]}" if quoted else MARKER + trail
    return f"{name}{sep}{hidden}"


def _sub_password_said(text: str) -> str:
    """``text`` with every password said in a sentence left out. A candidate found to be prose
    is tried again without its "for the …" part, then the search goes on from its next
    character, so it cannot swallow the start of the next one ("password password: X")."""
    out: list[str] = []
    done = pos = 0
    while (m := _PASSWORD_SAID.search(text, pos)) is not None:
        hidden = _password_said(m)
        if hidden is None:
            short = _PASSWORD_SAID_SHORT.match(text, m.start())
            if short is not None and short.end() != m.end():
                m, hidden = short, _password_said(short)
        if hidden is None:
            pos = m.start() + 1
            continue
        out += [text[done : m.start()], hidden]
        done = pos = m.end()
    out.append(text[done:])
    return "".join(out)


def _sub_password_before(m: re.Match[str]) -> str:
    value, rest = m.group(1), m.group(2)
    if value.startswith(("[secret", MARKER)) or value.endswith("]"):
        return m.group(0)
    quoted = value[0] in "\"'" and len(value) > 1
    core = value[1:-1] if quoted else value.strip(".,;:!?")
    if len(core) < 3 or not any(c.isalnum() for c in core):
        return m.group(0)
    if not quoted and _prose(core):
        return m.group(0)  # "this is my password", "what is your password"
    hidden = f"{value[0]}{MARKER}{value[-1]}" if quoted else MARKER
    return f"{hidden}{rest}"


def _hidden(value: str) -> bool:
    return value.lstrip("\"'").startswith("[secret")


def _sub_command(m: re.Match[str]) -> str:
    return m.group(0) if _hidden(m.group(2)) else f"{m.group(1)}{MARKER}"


def _line_before(m: re.Match[str], reach: int) -> tuple[int, int]:
    """Where the line holding ``m`` starts (at most ``reach`` back), and where ``m`` starts."""
    low = max(0, m.start() - reach)
    newline = m.string.rfind("\n", low, m.start())
    return (newline + 1 if newline >= 0 else low), m.start()


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_checks(digits: str) -> bool:
    # Issuers' numbers start with 2-6 (Mastercard, Amex, Diners, JCB, Visa, Discover, UnionPay).
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and _luhn(digits)


def _sub_card(m: re.Match[str]) -> str | None:
    found = m.group(0)
    if _card_checks(re.sub(r"\D", "", found)):
        return MARKER
    # A short last group may be the security code or the expiry after the number.
    groups = re.split(r"([ \u00a0.\-])", found)
    if len(groups) > 2 and len(groups[-1]) <= 3 and _card_checks("".join(groups[:-2:2])):
        return MARKER + groups[-2] + groups[-1]
    return None


def iban_checks(compact: str) -> bool:
    """True when ``compact`` (no spaces, any case) is as long as its country's IBANs and passes
    the IBAN check: its digits mod 97 are 1."""
    if not 15 <= len(compact) <= 34 or not compact.isalnum() or not compact.isascii():
        return False
    compact = compact.upper()
    if _IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _sub_iban(text: str) -> str:
    """``text`` with every IBAN left out. A candidate that fails its check may have run on
    over the start of a real one ("…41038a Konto pl62 3304 …"), so the search goes on from the
    candidate's next character, not from its end."""
    out: list[str] = []
    done = pos = 0
    while (m := _IBAN.search(text, pos)) is not None:
        chunks = re.split(r"([ \u00a0.\-])", m.group(0))  # chunks at even places
        # The pattern may run on into a following word: try shorter until it checks.
        for n in range(len(chunks), 0, -2):
            if iban_checks("".join(chunks[:n:2])):
                out += [text[done : m.start()], MARKER]
                done = pos = m.start() + len("".join(chunks[:n]))
                break
        else:
            pos = m.start() + 1
    out.append(text[done:])
    return "".join(out)


def _ssn_valid(area: str, group: str, serial: str) -> bool:
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _sub_ssn(m: re.Match[str]) -> str:
    return MARKER if _ssn_valid(m.group(1), m.group(2), m.group(3)) else m.group(0)


def _sub_ssn_named(m: re.Match[str]) -> str:
    if not _ssn_valid(m.group(3), m.group(4), m.group(5)):
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{MARKER}"


def _sub_otpauth(m: re.Match[str]) -> str:
    link = m.group(0)
    return MARKER if "secret=" in link or "data=" in link else link


def _sub_totp(m: re.Match[str]) -> str:
    seed = m.group(0).rstrip("=").replace(" ", "")
    letters = sum(c.isalpha() for c in seed)
    # A seed is random base32: digits 2-7 among the letters, and one case throughout.
    if letters == len(seed) or letters < 4 or not (seed.isupper() or seed.islower()):
        return m.group(0)
    start, end = _line_before(m, 60)
    return MARKER if _TOTP_WORDS.search(m.string, start, end) else m.group(0)


@functools.cache
def _seed_words() -> frozenset[str]:
    path = resources_dir() / "wordlists" / "bip39-english.txt"
    try:
        words = frozenset(path.read_text(encoding="utf-8").split())
    except OSError:  # a packaging mistake: the other rules still work
        log.error("the recovery-phrase word list %s is missing", path)
        return frozenset()
    return words


_PLAIN_WORD = re.compile(r"[A-Za-z]+")


def _sub_seed(m: re.Match[str]) -> str:
    words = _seed_words()
    text = m.group(0)
    out: list[str] = []
    pos = 0
    run: list[re.Match[str]] = []

    def close() -> None:
        nonlocal pos
        if len(run) >= _SEED_WORDS:
            out.append(text[pos : run[0].start()])
            out.append(MARKER)
            pos = run[-1].end()
        run.clear()

    for word in _PLAIN_WORD.finditer(text):
        if word.group(0).lower() in words:
            run.append(word)
        else:
            close()
    close()
    out.append(text[pos:])
    return "".join(out)


def _sub_bearer(m: re.Match[str]) -> str:
    value = m.group(3)
    # "Bearer authentication" and "token limit" are prose: a bearer token is not one short word.
    if value.isalpha() and len(value) < 24:
        return m.group(0)
    if m.group(1).lower() == "token" and len(value) < 16:
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{MARKER}"


def _sub_auth(m: re.Match[str]) -> str:
    value = m.group(5)
    if m.group(3) is None and (len(value) < 12 or value.isalpha()):
        return m.group(0)  # "Authorization: required" is prose
    scheme = f"{m.group(3)}{m.group(4)}" if m.group(3) else ""
    return f"{m.group(1)}{m.group(2)}{scheme}{MARKER}"


def _sub_random(m: re.Match[str]) -> str:
    return MARKER if looks_random(m.group(0)) else m.group(0)


_AWS_WORDS = re.compile(r"(?i)aws|secret|access|credential|\bkey\b")


def _pathlike(value: str) -> bool:
    """A run of words between slashes ("Users/Priya/Documents/…"), not a key with slashes."""
    wordy = sum(len(p) for p in re.findall(r"[A-Z]?[a-z]{2,}", value) if _wordlike(p))
    return wordy / len(value) >= 0.45


def _sub_b64(m: re.Match[str]) -> str:
    found = m.group(0)
    value = found.rstrip("=")
    has_all = (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    )
    if not has_all:
        return found
    # 40 characters of base64 just after "aws", "secret" or "key": an AWS secret access key.
    if len(value) == 40 and _AWS_WORDS.search(m.string, max(0, m.start() - 60), m.start()):
        return MARKER
    if not ("/" in value or "+" in value):
        return found  # no slash or plus: the general rule judges it
    core = value.replace("/", "").replace("+", "")
    if looks_random(core, min_len=30) or not _pathlike(value):
        return MARKER
    return found


# A long value named as a key, token, secret or password in prose ("my azure key is 3f9a…",
# "twilio auth token 0c4e…"): judged by its shape, more leniently than a value on its own.
_NAMED_VALUE = re.compile(
    r"(?<![A-Za-z0-9_\-+/=.~])(?=[A-Za-z_\-+/=.~]{0,298}\d)[A-Za-z0-9][A-Za-z0-9_\-+/=.~]{11,299}"
)
_KEY_WORDS = (
    r"api[ _-]?keys?|access[ _-]?keys?|secret[ _-]?keys?|keys?|tokens?|secrets?"
    r"|client[ _-]?secret|auth[ _-]?token|pw|pwd|passwords?|passwort|credentials?|twilio|azure"
    r"|schlüssel|cl[ée]|clave|chiave|chave|sleutel|klucz"
)
_KEY_BEFORE = re.compile(
    r"(?i)(?<![A-Za-z0-9])(?:" + _KEY_WORDS + r")"
    r"(?:[ \t]*[:=>\-]+|[ \t]+(?:is|was|are|ist|lautet|est|es|è|é|jest|to|now|reads|here"
    r"|for|of|my|the|this|our|your|api|account|auth|sid|id|value|string))*"
    r"[ \t]*[\"'`(]?$"
)
_KEY_NEEDS = (
    "key", "token", "secret", "pw", "pass", "cred", "twilio", "azure", "schl", "clé", "clave",
    "chiave", "chave", "sleutel", "klucz",
)  # fmt: skip


_NUMBERED = re.compile(r"([A-Za-z]*)\d+([A-Za-z]*)")


def _plain_part(part: str) -> bool:
    """A number, a word, or a word with a number ("v1", "rc2", "alpha4", "x86", "2nd")."""
    if part.isdigit() or part.isalpha():
        return True
    m = _NUMBERED.fullmatch(part)
    if m is None or (m.group(1) and m.group(2)):
        return False
    letters = m.group(1) or m.group(2)
    return len(letters) <= 3 or _wordlike(letters)


def _keyish(value: str) -> bool:
    """A value that reads like a generated key: letters and digits mixed within its parts."""
    if len(value) < 12:
        return False
    if not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return False
    if _HEX.fullmatch(value):
        return len(value.replace("-", "")) >= 16  # a hex key or a UUID named as a key
    # Dates, versions and identifiers are words and numbers between separators.
    parts = [p for p in re.split(r"[\-_.+/=~]", value) if p]
    if all(_plain_part(p) for p in parts):
        return False
    wordy = sum(len(p) for p in _PIECES.findall(value) if _wordlike(p))
    return wordy / len(value) < 0.45


def _sub_named(m: re.Match[str]) -> str:
    found = m.group(0)
    value = found.rstrip(".")
    if not _keyish(value):
        return found
    start, end = _line_before(m, 60)
    if not _KEY_BEFORE.search(m.string, start, end):
        return found
    return MARKER + found[len(value) :]


# Text without any of these holds no password word in any language above
_PW_NEEDS = (
    "pass", "pin", "pw", "mdp", "wort", "wachtwoord", "contrase", "senha", "hasło", "haslo",
    "parola", "senord", "adgangskode", "passord", "salasana", "heslo", "ifre", "jelsz",
)  # fmt: skip

# Each pass with the words its pattern cannot match without (lower case: looked for in the
# text in lower case); a text without any of them skips the pass at the cost of a substring scan.
_Pass = tuple[Callable[[str], str], tuple[str, ...]]


def _regex(pattern: re.Pattern[str], repl: Callable[[re.Match[str]], str]) -> Callable[[str], str]:
    return functools.partial(pattern.sub, repl)


def _retrying(
    pattern: re.Pattern[str], judge: Callable[[re.Match[str]], str | None]
) -> Callable[[str], str]:
    """A pass whose candidate, when ``judge`` turns it down (None), does not swallow the start
    of the next one: the search goes on from the candidate's next character."""

    def run(text: str) -> str:
        out: list[str] = []
        done = pos = 0
        while (m := pattern.search(text, pos)) is not None:
            hidden = judge(m)
            if hidden is None:
                pos = m.start() + 1
                continue
            out += [text[done : m.start()], hidden]
            done = pos = m.end()
        out.append(text[done:])
        return "".join(out)

    return run


_PASSES: tuple[_Pass, ...] = (
    (
        _regex(
            _URL_CREDENTIALS,
            lambda m: m.group(0) if m.group(2) == MARKER else f"{m[1]}{MARKER}{m[3]}",
        ),
        ("://",),
    ),
    (_regex(_WEBHOOK, lambda m: f"{m.group(1)}{MARKER}"), ("https://",)),
    (_regex(_OTPAUTH, _sub_otpauth), ("otpauth",)),
    (_regex(_KEYS, lambda m: MARKER), ()),
    # Numbers with check digits first: a password rule must not take an IBAN's first group.
    (_sub_iban, ()),
    (_retrying(_CARD, _sub_card), ()),
    (_regex(_CRYPT, lambda m: MARKER), ("$", "{s")),
    (_regex(_AUTH_HEADER, _sub_auth), ()),
    (_regex(_BEARER, _sub_bearer), ("bearer", "token")),
    (_regex(_ASSIGN, _sub_assign), ()),
    (_sub_password_said, _PW_NEEDS),
    (_regex(_PASSWORD_BEFORE, _sub_password_before), _PW_NEEDS),
    (_regex(_NAMED_VALUE, _sub_named), _KEY_NEEDS),
    (_regex(_MYSQL_P, _sub_command), ("mysql", "mariadb")),
    (_regex(_SSHPASS, _sub_command), ("sshpass",)),
    (_regex(_CURL_USER, _sub_command), ("-u", "--user")),
    (_regex(_BASE32, _sub_totp), ()),
    (_regex(_SSN, _sub_ssn), ("-",)),
    (_regex(_SSN_NAMED, _sub_ssn_named), ("ssn", "social security")),
    (_regex(_WORD_RUN, _sub_seed), ()),
    (_regex(_B64, _sub_b64), ()),
    (_regex(_RUN, _sub_random), ()),
)


def _one_pass(text: str) -> str:
    text = _sub_pem(text)
    # Lowered once: a pass only ever takes text out (the marker holds none of the words), so
    # a word missing here is missing after every pass too.
    lower = text.lower()
    for run, needs in _PASSES:
        if needs and not any(word in lower for word in needs):
            continue
        text = run(text)
    return text


_CRUDE = re.compile(r"[A-Za-z0-9_\-+/=.]{20,}")


def scrub(text: str) -> str:
    """``text`` with every string that looks like a secret replaced by ``[secret left out]``.

    Never raises, and scrubbing twice changes nothing more.
    """
    try:
        # A replacement can expose a neighbour to a rule (rare); repeat until nothing changes.
        for _ in range(4):
            done = _one_pass(text)
            if done == text:
                return done
            text = done
        return text
    except Exception:  # a bug here must not leak the text nor crash the chat
        log.exception("scrubbing failed; leaving out every long token instead")
        return _CRUDE.sub(MARKER, text)


def contains_secret(text: str) -> bool:
    """True when ``scrub`` would leave something out of ``text``."""
    return scrub(text) != text
