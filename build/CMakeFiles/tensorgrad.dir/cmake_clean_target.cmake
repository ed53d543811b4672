file(REMOVE_RECURSE
  "libtensorgrad.a"
)
