# Empty dependencies file for tensorgrad.
# This may be replaced when dependencies are built.
